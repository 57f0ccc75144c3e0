// swift-tools-version: 6.0
//
// ENSKit: the device side of ENS (Email Notification Service) for Swift apps. The
// library's sources are here (Sources/ENSKit), but the repository's root manifest vends
// it, so an app adds the repository by URL (docs/client.md); this package links that
// product as an app does, and holds what an app does not need. docs/client.md is the
// integration guide.
//
//   ENSKit        (from the root manifest) the library an app links: ENSClient, sealing,
//                 ENSPush, key storage
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
    platforms: [.macOS(.v15), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "ENSKitCurl", targets: ["ENSKitCurl"]),
        .executable(name: "ens-client", targets: ["ens-client"]),
    ],
    dependencies: [
        // The repository's root: ENSKit, as an app gets it.
        .package(name: "ens", path: "../.."),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .systemLibrary(name: "CCurlShim", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(name: "ENSKitCurl", dependencies: [.product(name: "ENSKit", package: "ens"), "CCurlShim"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "ens-client",
            dependencies: [
                .product(name: "ENSKit", package: "ens"), "ENSKitCurl",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ENSKitTests",
            dependencies: [
                .product(name: "ENSKit", package: "ens"),
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            resources: [.copy("Vectors")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ENSKitStackTests",
            dependencies: [.product(name: "ENSKit", package: "ens"), "ENSKitCurl", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
    ]
)
