// libFuzzer target: Exchange SendNotification callbacks (the body POSTed to /ews/).
//
// SendNotification(xml:) — XMLTree.parse (screening, libxml2, limits)
// and the SOAP/EWS walk. Thrown errors are normal; a trap is a finding.
import EWS
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: start, count: count))
    guard let message = try? SendNotification(xml: body) else { return 0 }
    precondition(!message.notifications.isEmpty || !message.errorCodes.isEmpty, "an empty SendNotification was accepted")
    for notification in message.notifications {
        precondition(!notification.subscriptionID.isEmpty, "a notification without a subscription id was accepted")
        precondition(Set(notification.newItemIDs).count == notification.newItemIDs.count, "duplicate item ids")
    }
    return 0
}

/// The entry point SwiftPM links as `main` (see FuzzSupport.swift).
@_cdecl("fuzz_soap_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    libFuzzerMain(argc, argv, fuzz)
}
