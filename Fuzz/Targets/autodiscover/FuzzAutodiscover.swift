// libFuzzer target: Autodiscover answers (POX autodiscover.xml and SOAP
// GetUserSettings), as an Exchange server or anything on its path may send them.
//
// XMLTree.parse, then Autodiscover.readPOX and readSOAP (internal: reached through
// @testable import, EWS being compiled with -enable-testing by scripts/fuzz.sh).
// Thrown errors are normal; a trap is a finding. What the readers return must obey
// their contract: settings only with an https URL, address redirects only with an @.
@testable import EWS
import FuzzSupport
import XML

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: start, count: count))
    guard let document = try? XMLTree.parse(body) else { return 0 }
    for answer in [Autodiscover.readPOX(document), Autodiscover.readSOAP(document)] {
        switch answer {
        case .settings(let url):
            precondition(Autodiscover.isHTTPS(url), "settings with a URL that is not https")
        case .redirectAddress(let address):
            precondition(address.contains("@"), "an address redirect without an @")
            _ = Autodiscover.domain(of: address)
        case .redirectURL(let url):
            _ = Autodiscover.isHTTPS(url)
        case .unauthorized, .nothing:
            break
        }
    }
    return 0
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_autodiscover_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
