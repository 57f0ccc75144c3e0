// swift-tools-version: 6.0
//
// ENS — Email Notification Service.
//
// Layering (see README "Code map"):
//   C system libraries  ->  one Swift wrapper each (the only importers of the C modules)
//   -> ENSCore (config, logging, protocol values) -> ENSResponder (router, endpoints)
//   -> thin executables (ens-fcgi, ens-apns, ens-cron).
// `make lint` checks that no other target imports a C module.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "ens",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "ens-fcgi", targets: ["ens-fcgi"]),
        .executable(name: "ens-apns", targets: ["ens-apns"]),
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
        .target(
            name: "ENSCore",
            dependencies: [
                "Codecs", "OpenSSL", "MariaDB", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Exchange Web Services: Autodiscover, push subscriptions, callbacks (SOAP over
        // libcurl; XML parsed by the XML module).
        .target(
            name: "EWS",
            dependencies: ["Codecs", "ENSCore", "Curl", "OpenSSL", "POSIX", "XML"],
            swiftSettings: swiftSettings
        ),
        // Microsoft Graph: application tokens (certificate client assertions),
        // subscriptions, change notifications, mail lookups (JSON over libcurl).
        .target(
            name: "Graph",
            dependencies: [
                "Codecs", "ENSCore", "Curl", "MariaDB", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ENSResponder",
            dependencies: [
                "Codecs", "ENSCore", "EWS", "Graph", "Curl", "FastCGI", "MariaDB", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        .target(
            name: "ENSSender",
            dependencies: [
                "Codecs", "ENSCore", "Curl", "MariaDB", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Executables: main.swift wires things together, nothing more.
        .executableTarget(
            name: "ens-fcgi",
            // No swift-argument-parser here: it links FoundationEssentials into every
            // worker process (ResponderOptions parses the five options).
            dependencies: [
                "ENSResponder", "ENSCore", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ens-apns",
            dependencies: [
                "Codecs", "ENSCore", "ENSSender", "OpenSSL", "MariaDB", "POSIX",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ens-cron",
            dependencies: [
                "Codecs", "ENSCore", "ENSSender", "Graph", "MariaDB", "OpenSSL", "POSIX",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Tests
        .testTarget(
            name: "ENSCoreTests",
            dependencies: [
                "Codecs", "ENSCore", "ENSResponder", "ENSSender", "EWS", "Graph", "OpenSSL", "MariaDB", "Curl", "FastCGI", "POSIX", "XML",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["Codecs", "ENSCore", "ENSSender", "Curl", "MariaDB", "OpenSSL", "POSIX"],
            swiftSettings: swiftSettings
        ),
    ]
)
