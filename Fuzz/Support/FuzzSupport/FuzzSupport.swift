internal import CLibFuzzer

/// Runs libFuzzer on `callback` (the target's LLVMFuzzerTestOneInput).
///
/// Why this exists: SwiftPM (tools version ≥ 5.5) compiles an executable target with
/// its entry point renamed to `<module>_main` and links with `--defsym main=<module>_main`,
/// which hides libFuzzer's own `main`. Each target therefore defines `<module>_main`
/// (e.g. `fuzz_form_main`) as `libFuzzerMain(argc, argv, ...)`. If SwiftPM stops
/// renaming, that symbol goes unused and libFuzzer's `main` runs as usual.
public func libFuzzerMain(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt {
    var argc = argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&argc, &argv, callback)
}
