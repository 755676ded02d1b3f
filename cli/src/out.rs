//! Writing to stdout without panicking when the reader has gone (`fenceproof list | head -1`): the
//! rest of the output is dropped and the command still ends with the exit code of its outcome.

/// `println!` that ignores a closed stdout.
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that ignores a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// Write `args` to stdout; a closed pipe (or any write error) drops the text.
pub fn write(args: std::fmt::Arguments) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_fmt(args);
}
