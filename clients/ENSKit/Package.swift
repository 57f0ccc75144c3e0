// swift-tools-version: 6.0
//
// ENSKit: the device side of ENS (Email Notification Service) for Swift apps.
// A package of its own (clients/ENSKit), so the server's build does not grow; it uses
// none of the server's modules. docs/client.md is the integration guide.
//
//   ENSKit        the library an app links: ENSClient, sealing, ENSPush, key storage
//   ENSKitCurl    an HTTP transport over the system's libcurl, for Linux hosts that must
//                 trust a private CA (URLSession on Linux cannot): ens-client, the tests
//   ens-client    a small command-line client (scripts/demo.sh uses it)
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "ENSKit",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "ENSKit", targets: ["ENSKit"]),
        .library(name: "ENSKitCurl", targets: ["ENSKitCurl"]),
        .executable(name: "ens-client", targets: ["ens-client"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The blind mode's self-signed device certificate (X509, SwiftASN1).
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
    ],
    targets: [
        .target(
            name: "ENSKit",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .systemLibrary(name: "CCurlShim", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(name: "ENSKitCurl", dependencies: ["ENSKit", "CCurlShim"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "ens-client",
            dependencies: [
                "ENSKit", "ENSKitCurl",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ENSKitTests",
            dependencies: ["ENSKit", .product(name: "Crypto", package: "swift-crypto"), .product(name: "CryptoExtras", package: "swift-crypto")],
            resources: [.copy("Vectors")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ENSKitStackTests",
            dependencies: ["ENSKit", "ENSKitCurl", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
    ]
)
