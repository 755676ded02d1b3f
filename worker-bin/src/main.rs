//! The reference worker binary: the protocol as specified, no mutants.

fn main() -> std::process::ExitCode {
    fenceproof_worker::main()
}
