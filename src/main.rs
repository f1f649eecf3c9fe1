fn main() -> std::process::ExitCode {
    metascript::cli::main()
}
