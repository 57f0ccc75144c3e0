// swift-tools-version: 6.0
//
// ENS — Email Notification Service.
//
// The targets are listed lowest layer first (docs/architecture.md draws them):
//   C libraries -> one wrapper each (the only importers of the C modules)
//   -> ENSModel (values) -> ENSConfig, ENSMetrics, ENSVault, SenderWire, ENSStore
//   -> protocol clients EWS, Graph -> MailBackends (one folder per backend)
//   -> ENSResponder, ENSSender -> three thin executables (ens-fcgi, ens-sender, ens-cron).
// This manifest is the module graph: each target lists exactly the modules its files
// import (`make lint`: scripts/check_manifest.py), and docs/architecture.md's module
// table is generated from it. scripts/check_imports.py holds the few rules a manifest
// cannot say. ENS_FUZZ=1 adds the libFuzzer targets (make fuzz).
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let logging = Target.Dependency.product(name: "Logging", package: "swift-log")

/// Each module's unit tests (Tests/<Module>Tests, in process, no stack): the module,
/// ENSTestSupport and exactly what else their files import (`make lint` holds them to
/// it), so a change below a module rebuilds only the tests that can see it.
let unitTests: [(module: String, alsoImports: [Target.Dependency])] = [
    ("Codecs", []),
    ("Curl", ["POSIX"]),
    ("MariaDB", []),
    ("OpenSSL", ["Codecs"]),
    ("POSIX", []),
    ("XML", []),
    ("ENSModel", ["POSIX"]),
    ("ENSConfig", ["ENSModel", "ENSStore", "MariaDB", logging]),
    ("ENSMetrics", ["ENSModel"]),
    ("ENSVault", ["Codecs", "ENSModel", "EWS", "OpenSSL", "XML"]),
    ("ENSStore", ["Codecs", "ENSModel", "MariaDB", "OpenSSL"]),
    ("SenderWire", ["ENSModel", "ENSVault", "OpenSSL", "POSIX"]),
    ("EWS", ["Curl", "ENSModel", "MailBackends", "POSIX", "XML"]),
    ("Graph", ["Codecs", "ENSConfig", "ENSModel", "ENSResponder", "ENSVault", "MailBackends", "OpenSSL", "POSIX"]),
    ("ENSSender", ["Codecs", "ENSMetrics", "ENSModel", "ENSStore", "ENSVault", "MailBackends", "OpenSSL", "POSIX", "SenderWire", logging]),
    ("MailBackends", ["Codecs", "ENSConfig", "ENSHTTP", "ENSModel", "ENSStore", "ENSVault", "MariaDB", "OpenSSL", "POSIX", "SenderWire", logging]),
    ("ENSResponder", ["Codecs", "ENSConfig", "ENSHTTP", "ENSModel", "ENSStore", "ENSVault", "MailBackends", "MariaDB", "OpenSSL", logging]),
]
let unitTestTargets: [Target] = unitTests.map { module, alsoImports in
    .testTarget(
        name: "\(module)Tests",
        dependencies: [.target(name: module), "ENSTestSupport"] + alsoImports,
        swiftSettings: swiftSettings
    )
}

let package = Package(
    name: "ens",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "ens-fcgi", targets: ["ens-fcgi"]),
        .executable(name: "ens-sender", targets: ["ens-sender"]),
        .executable(name: "ens-cron", targets: ["ens-cron"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // MARK: C libraries (module maps and shims only)
        .systemLibrary(name: "CFastCGI", pkgConfig: "fcgi", providers: [.apt(["libfcgi-dev"])]),
        .systemLibrary(name: "CMariaDB", pkgConfig: "libmariadb", providers: [.apt(["libmariadb-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CLibXML2", pkgConfig: "libxml-2.0", providers: [.apt(["libxml2-dev"])]),

        // MARK: One wrapper per C library; each owns every pointer of its library.
        .target(name: "FastCGI", dependencies: ["CFastCGI", "POSIX"], swiftSettings: swiftSettings),
        .target(name: "MariaDB", dependencies: ["CMariaDB"], swiftSettings: swiftSettings),
        .target(name: "OpenSSL", dependencies: ["COpenSSL", "Codecs"], swiftSettings: swiftSettings),
        .target(name: "Curl", dependencies: ["CCurl", "POSIX"], swiftSettings: swiftSettings),
        // XMLTree: libxml2's SAX2 parser under limits, DTDs refused, no network.
        .target(name: "XML", dependencies: ["CLibXML2"], swiftSettings: swiftSettings),

        // MARK: Pure Swift
        // Hex and base64 (standard and URL-safe): the one codec of each.
        .target(name: "Codecs", swiftSettings: swiftSettings),
        .systemLibrary(name: "CLinux"),
        .target(name: "POSIX", dependencies: ["CLinux"], swiftSettings: swiftSettings),
        // MARK: ENS's own layers, lowest first. Each imports exactly what it lists here.

        // Values: timestamps, JSON, form bodies, records, privacy modes. No I/O.
        .target(name: "ENSModel", dependencies: ["Codecs", "POSIX"], swiftSettings: swiftSettings),
        // The configuration file (declared keys, parsing, reload) and the log format the
        // executables bootstrap swift-log with.
        .target(
            name: "ENSConfig",
            dependencies: ["Codecs", "ENSModel", "OpenSSL", "POSIX", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // Per-process counters written to a directory for /metrics to add up.
        .target(
            name: "ENSMetrics",
            dependencies: ["ENSModel", "POSIX", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // What only the master key and the per-user RSA keys open: sealed parameters,
        // credential boxes, callback and routing tokens, row bindings.
        .target(
            name: "ENSVault",
            dependencies: ["Codecs", "ENSModel", "OpenSSL"],
            swiftSettings: swiftSettings
        ),
        // Every SQL statement: the stores, the migrator, maintenance statements. The only
        // module above the wrappers that imports MariaDB.
        .target(
            name: "ENSStore",
            dependencies: [
                "Codecs", "ENSConfig", "ENSMetrics", "ENSModel", "ENSVault", "MariaDB", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // What the responders hand the sender over its Unix socket: frames, push
        // notifications, mail payloads, the client.
        .target(
            name: "SenderWire",
            dependencies: ["Codecs", "ENSModel", "ENSVault", "OpenSSL", "POSIX"],
            swiftSettings: swiftSettings
        ),

        // MARK: Protocol clients: they speak EWS and Graph and know nothing of ENS's
        // stores, vault or configuration.
        // Exchange Web Services: Autodiscover, push subscriptions, callbacks (SOAP over
        // libcurl; XML parsed by the XML module).
        .target(
            name: "EWS",
            dependencies: ["Codecs", "ENSModel", "Curl", "OpenSSL", "POSIX", "XML"],
            swiftSettings: swiftSettings
        ),
        // Microsoft Graph: application tokens (certificate client assertions),
        // subscriptions, change notifications, mail lookups (JSON over libcurl).
        .target(
            name: "Graph",
            dependencies: ["Codecs", "ENSModel", "Curl", "OpenSSL", "POSIX"],
            swiftSettings: swiftSettings
        ),

        // MARK: HTTP core: the request values, the router and the per-thread context that
        // the device API and the backends' callbacks are served with. It names no backend:
        // a request goes down from the dispatcher to a handler, never back up.
        .target(
            name: "ENSHTTP",
            dependencies: [
                "ENSConfig", "ENSMetrics", "ENSModel", "ENSStore", "ENSVault", "SenderWire", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Mail backends: one folder per backend (Exchange, Graph), each with its
        // registrar, notifications and keeper; Mail/ holds what every backend shares
        // (MailBackendTable.all is the table).
        .target(
            name: "MailBackends",
            dependencies: [
                "Codecs", "ENSConfig", "ENSHTTP", "ENSMetrics", "ENSModel", "ENSStore", "ENSVault", "SenderWire",
                "EWS", "Graph", "Curl", "OpenSSL", "POSIX", "XML",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Services
        // Maintenance: the jobs ens-cron runs under its locks, their run log and the
        // status report (its statements are in ENSStore/Maintenance).
        .target(
            name: "ENSMaintenance",
            dependencies: [
                "ENSConfig", "ENSModel", "ENSStore", "ENSVault", "Graph", "MailBackends", "OpenSSL", "POSIX", "SenderWire",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The FastCGI pool, the router and the device API.
        .target(
            name: "ENSResponder",
            dependencies: [
                "Codecs", "ENSConfig", "ENSHTTP", "ENSMetrics", "ENSModel", "ENSStore", "ENSVault", "MailBackends", "SenderWire",
                "Curl", "FastCGI", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ENSSender",
            dependencies: [
                "Codecs", "ENSMetrics", "ENSModel", "ENSStore", "SenderWire", "Curl", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Executables: main.swift wires things together, nothing more.
        .executableTarget(
            name: "ens-fcgi",
            // No swift-argument-parser here: it links FoundationEssentials into every
            // worker process (ResponderOptions parses the five options).
            dependencies: ["ENSConfig", "ENSModel", "ENSResponder", "ENSStore", "MailBackends", "POSIX", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ens-sender",
            dependencies: [
                "ENSConfig", "ENSMetrics", "ENSModel", "ENSSender", "ENSStore", "SenderWire", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ens-cron",
            dependencies: [
                "Codecs", "ENSConfig", "ENSMaintenance", "ENSModel", "ENSSender", "ENSStore", "ENSVault", "POSIX",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Tests: one target per module (Tests/<Module>Tests, in-process, no stack:
        // what `make check` runs), the helpers they share, and the integration suites
        // that need the stack scripts/test.sh starts.
        .target(
            name: "ENSTestSupport",
            // Nothing that reaches libxml2 (XML, through EWS): with Foundation in one
            // compilation they clash over ICU's headers. What needs the responder
            // (InProcess) lives in ENSResponderTests.
            dependencies: ["Codecs", "ENSVault", "MariaDB", "OpenSSL", "POSIX"],
            path: "Tests/ENSTestSupport",
            swiftSettings: swiftSettings
        ),
    ] + unitTestTargets
)

// MARK: ENSKit, the device SDK (clients/ENSKit, docs/client.md), vended from this root so
// an app adds the repository by URL and links the ENSKit product; SwiftPM then builds
// ENSKit and its three dependencies, never a server module. The server's own builds
// (make and its scripts) set ENS_SERVER_ONLY=1, which leaves ENSKit out: they never
// compile swift-crypto. clients/ENSKit (ens-client, ENSKit's tests) links this product.
if Context.environment["ENS_SERVER_ONLY"] != "1" {
    package.platforms = [.macOS(.v15), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)]
    package.dependencies += [
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // The blind mode's self-signed device certificate (X509, SwiftASN1).
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
    ]
    package.products.append(.library(name: "ENSKit", targets: ["ENSKit"]))
    package.targets.append(.target(
        name: "ENSKit",
        dependencies: [
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
        ],
        path: "clients/ENSKit/Sources/ENSKit",
        swiftSettings: [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("InternalImportsByDefault")]
    ))
}

// MARK: Integration tests: the suites that need the stack scripts/test.sh starts, built
// only when asked (ENS_INTEGRATION_TESTS=1: make test, make test-stack, make suite), so
// that `swift build --build-tests` and `swift test` are the unit tests alone.
if Context.environment["ENS_INTEGRATION_TESTS"] == "1" {
    package.targets.append(.testTarget(
        name: "IntegrationTests",
        dependencies: [
            "Codecs", "Curl", "ENSMetrics", "ENSModel", "ENSSender", "ENSStore", "ENSTestSupport", "ENSVault", "MailBackends", "MariaDB",
            "OpenSSL", "POSIX", "SenderWire",
        ],
        swiftSettings: swiftSettings
    ))
}

// MARK: Fuzzing (make fuzz, scripts/fuzz.sh): libFuzzer executables over the very same
// modules, built only when ENS_FUZZ=1, with -sanitize=fuzzer and -enable-testing passed
// by the script so the targets can `@testable import` the internal parsers they exercise.
if Context.environment["ENS_FUZZ"] == "1" {
    /// One libFuzzer executable: Fuzz/Targets/<name>/, corpus in Fuzz/corpus/<name>/. Its
    /// source defines `fuzz_<name>_main` (see Fuzz/Support/FuzzSupport).
    func fuzzTarget(_ name: String, _ dependencies: [Target.Dependency]) -> Target {
        .executableTarget(name: "fuzz-\(name)", dependencies: dependencies + ["FuzzSupport"], path: "Fuzz/Targets/\(name)",
                          swiftSettings: swiftSettings)
    }
    package.targets += [
        // libFuzzer's driver entry, for the targets' main (see FuzzSupport.swift).
        .systemLibrary(name: "CLibFuzzer", path: "Fuzz/Support/CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"], path: "Fuzz/Support/FuzzSupport", swiftSettings: swiftSettings),
        fuzzTarget("form", ["ENSHTTP", "ENSModel", "ENSResponder"]),
        fuzzTarget("json", ["ENSModel", "ENSResponder", "SenderWire"]),
        fuzzTarget("base64", ["Codecs"]),
        fuzzTarget("sealed", ["ENSVault", "ENSResponder", "OpenSSL"]),
        fuzzTarget("callback", ["ENSModel", "ENSVault", "EWS", "OpenSSL"]),
        fuzzTarget("soap", ["EWS"]),
        fuzzTarget("autodiscover", ["EWS", "XML"]),
        fuzzTarget("frames", ["SenderWire"]),
        fuzzTarget("config", ["ENSConfig"]),
        fuzzTarget("dovecot", ["Codecs", "MailBackends", "POSIX"]),
    ]
}
