//! The mutant worker binary (`--features mutants`): the same program, plus `--mutant NAME` to run
//! as one named broken variant of the protocol. Never built by a plain `cargo build`.

fn main() -> std::process::ExitCode {
    fenceproof_worker::main()
}
