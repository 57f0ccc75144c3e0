internal import Codecs
internal import COpenSSL

/// A read-only memory BIO over `bytes` for the length of `body`: how PEM text reaches
/// OpenSSL's readers. Nil when the BIO cannot be made (OpenSSL refuses an empty buffer)
/// or `body` returns nil; the caller drains the error queue.
enum MemoryBIO {
    static func reading<T>(_ bytes: [UInt8], _ body: (OpaquePointer) -> T?) -> T? {
        guard bytes.count <= Int(Int32.max) else { return nil }
        return bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return body(bio)
        }
    }
}

/// OpenSSL's `i2d_*` encoders, run the way they want: once for the length, once into
/// a buffer of that size.
enum DER {
    static func encode(_ operation: String, _ i2d: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) throws(OpenSSLError) -> [UInt8] {
        let length = i2d(nil)
        guard length > 0 else { throw .drain(operation) }
        var output = [UInt8](repeating: 0, count: Int(length))
        let written = output.withUnsafeMutableBufferPointer { buffer in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d(&cursor)
        }
        guard written == length else { throw .drain(operation) }
        return output
    }
}

/// PEM armour (RFC 7468): base64 in 64-character lines between BEGIN/END labels, the
/// layout OpenSSL's PEM writers produce. Every PEM this module writes comes from here.
enum PEM {
    static func encode(_ der: [UInt8], label: String) -> [UInt8] {
        let base64 = Array(Base64.encode(der).utf8)
        var output = Array("-----BEGIN \(label)-----\n".utf8)
        var line = 0
        while line < base64.count {
            output += base64[line..<min(line + 64, base64.count)]
            output.append(UInt8(ascii: "\n"))
            line += 64
        }
        output += Array("-----END \(label)-----\n".utf8)
        return output
    }

    static func encodeString(_ der: [UInt8], label: String) -> String {
        String(decoding: encode(der, label: label), as: UTF8.self)
    }
}
