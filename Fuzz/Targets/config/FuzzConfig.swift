// libFuzzer target: the config file (/etc/ens/ens.conf).
//
// ConfigFile(parsing:) and ENSConfiguration(file:) on the input as text (the loader
// refuses non-UTF-8 first, so only valid UTF-8 goes on). Thrown errors are normal; a
// trap is a finding.
import ENSConfig
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    guard let text = String(validating: bytes, as: UTF8.self), let file = try? ConfigFile(parsing: text) else { return 0 }
    for (key, value) in file.values {
        precondition(file.lines[key] != nil, "a key without a line number")
        precondition(!value.unicodeScalars.contains { $0.value < 0x20 && $0 != "\t" }, "control characters in a value")
    }
    guard let configuration = try? ENSConfiguration(file: file) else { return 0 }
    _ = try? configuration.graph.completeTenants()
    return 0
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_config_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
