public import Foundation
#if canImport(Security)
internal import Security
#endif

/// Why a key store could not read or write an item. The description never contains
/// the item's value.
public struct ENSKeyStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// What ENSKit keeps per user on the device, under names it chooses (``ENSKeyStoreItem``):
/// the user's pinned public key, the device secret, the private keys of the `encrypted`
/// and blind modes, the registered push token and its `pushTag`.
///
/// Implementations: ``KeychainKeyStore`` on Apple platforms (give it an access group
/// shared with the Notification Service Extension), ``FileKeyStore`` and
/// ``MemoryKeyStore`` elsewhere and in tests. Writes with `nil` delete.
public protocol ENSKeyStore: Sendable {
    func data(for item: ENSKeyStoreItem) throws(ENSKeyStoreError) -> Data?
    func set(_ data: Data?, for item: ENSKeyStoreItem) throws(ENSKeyStoreError)
}

/// The name of one stored value: `<namespace>/<kind>/<user id or tag>`. The namespace
/// is the ENS server's host (and port), so two servers never share an item.
public struct ENSKeyStoreItem: Sendable, Hashable, CustomStringConvertible {
    public let name: String

    public init(name: String) { self.name = name }

    public var description: String { name }

    static func serverKey(_ namespace: String, _ userID: String) -> Self { Self(name: "\(namespace)/server-key/\(userID)") }
    /// The sealed form ENS said it opens with that key (`e1`, envelopes); none: chunked.
    static func serverSealing(_ namespace: String, _ userID: String) -> Self { Self(name: "\(namespace)/server-sealing/\(userID)") }
    static func deviceSecret(_ namespace: String, _ userID: String) -> Self { Self(name: "\(namespace)/device-secret/\(userID)") }
    static func previewKey(_ namespace: String, _ userID: String) -> Self { Self(name: "\(namespace)/preview-key/\(userID)") }
    static func blindKey(_ namespace: String, _ userID: String) -> Self { Self(name: "\(namespace)/blind-key/\(userID)") }
    static func registeredToken(_ namespace: String, _ userID: String) -> Self { Self(name: "\(namespace)/push-token/\(userID)") }
    static func pushTag(_ namespace: String, _ userID: String) -> Self { Self(name: "\(namespace)/push-tag/\(userID)") }
    /// The user a `pushTag` belongs to, so an extension can tell whose push it got.
    static func tagOwner(_ namespace: String, _ tag: String) -> Self { Self(name: "\(namespace)/tag-owner/\(tag)") }
}

/// Items in memory, for tests and for apps that keep nothing between launches.
public final class MemoryKeyStore: ENSKeyStore, @unchecked Sendable {
    // @unchecked: every access to `items` holds `lock`.
    private let lock = NSLock()
    private var items: [ENSKeyStoreItem: Data] = [:]

    public init() {}

    public func data(for item: ENSKeyStoreItem) throws(ENSKeyStoreError) -> Data? {
        lock.lock()
        defer { lock.unlock() }
        return items[item]
    }

    public func set(_ data: Data?, for item: ENSKeyStoreItem) throws(ENSKeyStoreError) {
        lock.lock()
        defer { lock.unlock() }
        items[item] = data
    }
}

/// Items as files in one directory (created 0700; each file 0600, written atomically),
/// named by the hex of the item's name. For Linux hosts and tests; on Apple platforms
/// use ``KeychainKeyStore``. A directory that is already there must be a directory of
/// this user's that no one else may enter (mode 0700 or stricter): device secrets and
/// keys are never written where another local user could read them.
public struct FileKeyStore: ENSKeyStore {
    public let directory: URL

    public init(directory: URL) throws(ENSKeyStoreError) {
        self.directory = directory
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw ENSKeyStoreError("cannot create the key store directory")
        }
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: directory.path),
              attributes[.type] as? FileAttributeType == .typeDirectory,
              let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue, mode & 0o077 == 0,
              (attributes[.ownerAccountID] as? NSNumber)?.uint32Value == getuid() else {
            throw ENSKeyStoreError("the key store directory must be this user's own, mode 0700")
        }
    }

    private func url(_ item: ENSKeyStoreItem) -> URL {
        directory.appendingPathComponent(Hex.encode(Array(item.name.utf8)))
    }

    public func data(for item: ENSKeyStoreItem) throws(ENSKeyStoreError) -> Data? {
        let url = url(item)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        do {
            return try Data(contentsOf: url)
        } catch {
            throw ENSKeyStoreError("cannot read a key store item")
        }
    }

    public func set(_ data: Data?, for item: ENSKeyStoreItem) throws(ENSKeyStoreError) {
        let url = url(item)
        do {
            guard let data else {
                if FileManager.default.fileExists(atPath: url.path) { try FileManager.default.removeItem(at: url) }
                return
            }
            // Written under a temporary name with owner-only permissions, then renamed,
            // so a reader never sees half a key and no one else ever can.
            let temporary = directory.appendingPathComponent(".tmp-\(UUID().uuidString)")
            guard FileManager.default.createFile(atPath: temporary.path, contents: data, attributes: [.posixPermissions: 0o600]) else {
                throw ENSKeyStoreError("cannot write a key store item")
            }
            // rename(2) replaces an existing item atomically, which FileManager's
            // move does not (and its replaceItemAt differs between platforms).
            guard rename(temporary.path, url.path) == 0 else {
                try? FileManager.default.removeItem(at: temporary)
                throw ENSKeyStoreError("cannot write a key store item")
            }
        } catch let error as ENSKeyStoreError {
            throw error
        } catch {
            throw ENSKeyStoreError("cannot write a key store item")
        }
    }
}

#if canImport(Security)
/// Items as generic passwords in the keychain: service `service`, account the item's
/// name, readable after the device's first unlock (a push may arrive while it is
/// locked), never synced to other devices. Give the app and its Notification Service
/// Extension the same `accessGroup`, so the extension finds the keys.
public struct KeychainKeyStore: ENSKeyStore {
    public let service: String
    public let accessGroup: String?

    public init(service: String = "ENSKit", accessGroup: String? = nil) {
        self.service = service
        self.accessGroup = accessGroup
    }

    private func query(_ item: ENSKeyStoreItem) -> [String: Any] {
        var query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: item.name,
        ]
        if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
        return query
    }

    public func data(for item: ENSKeyStoreItem) throws(ENSKeyStoreError) -> Data? {
        var query = query(item)
        query[kSecReturnData as String] = true
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        var result: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &result)
        switch status {
        case errSecSuccess: return result as? Data
        case errSecItemNotFound: return nil
        default: throw ENSKeyStoreError("keychain read failed (\(status))")
        }
    }

    public func set(_ data: Data?, for item: ENSKeyStoreItem) throws(ENSKeyStoreError) {
        let query = query(item)
        let deleted = SecItemDelete(query as CFDictionary)
        guard deleted == errSecSuccess || deleted == errSecItemNotFound else {
            throw ENSKeyStoreError("keychain delete failed (\(deleted))")
        }
        guard let data else { return }
        var attributes = query
        attributes[kSecValueData as String] = data
        attributes[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
        let status = SecItemAdd(attributes as CFDictionary, nil)
        guard status == errSecSuccess else { throw ENSKeyStoreError("keychain write failed (\(status))") }
    }
}
#endif
