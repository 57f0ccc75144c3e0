// swift-tools-version: 6.0
//
// libFuzzer targets for ENS (`make fuzz`, scripts/fuzz.sh). Build:
//
//     swift build -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
//
// The main package ("..") offers executables only, no library products, so a package
// that depends on it by path cannot import ENSCore or EWS. Instead Modules/ holds
// symlinks to ../Sources/<module>, and the targets below mirror the main manifest's
// definitions of those modules (same dependencies, same Swift settings): the fuzzers
// compile the very same source files, instrumented. Keep them in step with
// ../Package.swift when a module gains a dependency.
//
// ENSCore, EWS and ENSResponder are compiled with -enable-testing so that the targets
// can `@testable import` the internal code they exercise (Autodiscover.readPOX/readSOAP,
// ParameterDecoder, SealedPayload, SealedParameter.unpadType2), as the unit tests do.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]
let testable: [SwiftSetting] = swiftSettings + [.unsafeFlags(["-enable-testing"])]

/// One libFuzzer executable: Targets/<name>/, corpus in corpus/<name>/. Its source
/// defines `fuzz_<name>_main` (see Support/FuzzSupport).
func fuzzTarget(_ name: String, _ dependencies: [Target.Dependency]) -> Target {
    .executableTarget(name: "fuzz-\(name)", dependencies: dependencies + ["FuzzSupport"], path: "Targets/\(name)")
}

let package = Package(
    name: "ens-fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        // Mirrors of ../Package.swift (sources through the Modules/ symlinks).
        .systemLibrary(name: "CFastCGI", path: "Modules/CFastCGI", pkgConfig: "fcgi"),
        .systemLibrary(name: "CMariaDB", path: "Modules/CMariaDB", pkgConfig: "libmariadb"),
        .systemLibrary(name: "COpenSSL", path: "Modules/COpenSSL", pkgConfig: "openssl"),
        .systemLibrary(name: "CCurl", path: "Modules/CCurl", pkgConfig: "libcurl"),
        .systemLibrary(name: "CLibXML2", path: "Modules/CLibXML2", pkgConfig: "libxml-2.0"),
        .target(name: "FastCGI", dependencies: ["CFastCGI", "POSIX"], path: "Modules/FastCGI", swiftSettings: swiftSettings),
        .target(name: "MariaDB", dependencies: ["CMariaDB"], path: "Modules/MariaDB", swiftSettings: swiftSettings),
        .target(name: "Codecs", path: "Modules/Codecs", swiftSettings: swiftSettings),
        .target(name: "OpenSSL", dependencies: ["COpenSSL", "Codecs"], path: "Modules/OpenSSL", swiftSettings: swiftSettings),
        .target(name: "Curl", dependencies: ["CCurl", "POSIX"], path: "Modules/Curl", swiftSettings: swiftSettings),
        .target(name: "XML", dependencies: ["CLibXML2"], path: "Modules/XML", swiftSettings: swiftSettings),
        .systemLibrary(name: "CLinux", path: "Modules/CLinux"),
        .target(name: "POSIX", dependencies: ["CLinux"], path: "Modules/POSIX", swiftSettings: swiftSettings),
        .target(
            name: "ENSCore",
            dependencies: ["Codecs", "OpenSSL", "MariaDB", "POSIX", .product(name: "Logging", package: "swift-log")],
            path: "Modules/ENSCore",
            swiftSettings: testable
        ),
        .target(name: "EWS", dependencies: ["Codecs", "ENSCore", "Curl", "OpenSSL", "POSIX", "XML"], path: "Modules/EWS", swiftSettings: testable),
        .target(
            name: "Graph",
            dependencies: [
                "Codecs", "ENSCore", "Curl", "MariaDB", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Modules/Graph",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ENSResponder",
            dependencies: [
                "Codecs", "ENSCore", "EWS", "Graph", "Curl", "FastCGI", "MariaDB", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Modules/ENSResponder",
            swiftSettings: testable
        ),

        // libFuzzer's driver entry, for the targets' main (see FuzzSupport.swift).
        .systemLibrary(name: "CLibFuzzer", path: "Support/CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"], path: "Support/FuzzSupport", swiftSettings: swiftSettings),

        // The fuzz targets.
        fuzzTarget("form", ["ENSCore", "ENSResponder"]),
        fuzzTarget("json", ["ENSCore", "ENSResponder"]),
        fuzzTarget("base64", ["Codecs"]),
        fuzzTarget("sealed", ["ENSCore", "ENSResponder", "OpenSSL"]),
        fuzzTarget("callback", ["ENSCore", "EWS", "OpenSSL"]),
        fuzzTarget("soap", ["EWS"]),
        fuzzTarget("autodiscover", ["EWS", "XML"]),
        fuzzTarget("frames", ["ENSCore"]),
        fuzzTarget("config", ["ENSCore"]),
    ]
)
