//! The `lockctl` binary: see the crate docs of `lockctl` for commands and exit codes.

fn main() -> std::process::ExitCode {
    lockctl::main()
}
