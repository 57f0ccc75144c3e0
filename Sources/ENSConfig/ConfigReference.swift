internal import ENSModel
/// The configuration's documentation, generated from the declarations (`ConfigSchema`):
/// config/ens.conf.example and ens.conf(5) (debian/man/ens.conf.5). `ens-cron
/// config-reference --example` / `--man` prints them; `make config-docs` rewrites the
/// committed files and `make lint` fails when they differ.
public enum ConfigReference {
    /// The man page's date: change it with the page's content.
    static let revised = "2026-11-27"

    // MARK: The example file

    public static func example() -> String {
        var out: [String] = exampleHeader.split(separator: "\n", omittingEmptySubsequences: false).map { $0.isEmpty ? "#" : "# \($0)" }
        for section in ConfigSchema.sections {
            out += ["", "", "# " + String(repeating: "-", count: 81), "# \(section.title)", "# " + String(repeating: "-", count: 81)]
            if !section.intro.isEmpty { out += [""] + comment(section.intro) }
            for key in section.keys {
                out += [""] + comment(paragraphs(key.doc, key.details))
                out += comment("Value: \(key.summary).\(reloadNote(key.reload))")
                switch key.example {
                case .defaultValue: out.append(setting(key.name, key.defaultValue ?? ""))
                case .value(let value): out.append(setting(key.name, value))
                case .commented(let value): out.append("# \(key.name) = \(value)")
                }
            }
            for pattern in section.patterns {
                out += [""] + comment(paragraphs(pattern.doc, pattern.details))
                out += comment("Value: \(pattern.summary).")
                out += pattern.examples.map { "# \($0)" }
            }
        }
        return out.joined(separator: "\n") + "\n"
    }

    /// `key = value`, or `key =` for an empty value.
    private static func setting(_ name: String, _ value: String) -> String {
        value.isEmpty ? "\(name) =" : "\(name) = \(value)"
    }

    static let exampleHeader = """
        ENS configuration: /etc/ens/ens.conf

        Every setting ENS accepts is listed below with its built-in default, so this file
        can be copied as it is and then edited. A key left out of the file keeps the default
        shown here (the two callback URLs show the form: set them to this host's). This file
        is generated from the declarations in Sources/ENSConfig/Components (`make
        config-docs`); ens.conf(5) says the same.

        Format:
          - one `key = value` per line; spaces around `=` are optional;
          - lines starting with `#` are comments; blank lines are ignored;
          - no comments after a value: `fcgi.threads = 4  # four` sets the value to
            "4  # four", which is then rejected;
          - each key at most once.
        An unknown key, a key set twice or a bad value stops the program at start-up with a
        message that names the key and its line, for example:
          ens-fcgi: configuration key 'fcgi.thread' (line 12) is not a known setting

        Which file is read: --config PATH, else $ENS_CONFIG, else /etc/ens/ens.conf.
        Check a file without starting anything (run it as the service user, so the
        permissions of the files it names are tested too):
          runuser -u ens -- ens-fcgi --check --config /etc/ens/ens.conf

        Secrets never go into this file. The *_file keys name files that hold them, one
        value per file; surrounding whitespace and the trailing newline are ignored.

        SIGHUP (systemctl reload) makes every ENS process read this file again: a file with
        an error is reported and the running configuration kept; keys marked "a reload
        applies it" take effect, every other changed key is logged as needing a restart
        (systemctl restart ens-fcgi, ens-sender).
        """

    private static func reloadNote(_ reload: ConfigKey.Reload) -> String {
        switch reload {
        case .restart: ""
        case .everyProcess: " A reload applies it."
        case .responders: " A reload applies it (ens-fcgi)."
        }
    }

    /// Paragraphs (blank-line separated) as `#` comment lines, wrapped; lines indented by
    /// two spaces are kept as they are.
    private static func comment(_ text: String) -> [String] {
        var lines: [String] = []
        for (index, paragraph) in blocks(text).enumerated() {
            if index > 0 && paragraph.startsParagraph { lines.append("#") }
            switch paragraph.block {
            case .text(let words): lines += wrap(words, width: 86).map { "# \($0)" }
            case .verbatim(let verbatim): lines += verbatim.map { "# \($0)" }
            }
        }
        return lines
    }

    // MARK: The man page

    public static func manPage() -> String {
        var out = [
            ".\\\" Generated from Sources/ENSConfig/Components by `ens-cron config-reference --man`",
            ".\\\" (make config-docs); edit the declarations, not this file.",
            ".TH ENS.CONF 5 \"\(revised)\" \"ens\" \"ENS\"",
            ".SH NAME",
            "ens.conf \\- configuration file of ENS, the Email Notification Service",
            ".SH SYNOPSIS",
            ".I /etc/ens/ens.conf",
            ".SH DESCRIPTION",
        ]
        out += roff("""
            ens-fcgi, ens-sender and ens-cron read one file of `key = value` lines: --config PATH, \
            else $ENS_CONFIG, else /etc/ens/ens.conf. Lines starting with # are comments, blank \
            lines are ignored, and there are no comments after a value. Each key may be set once; \
            a key left out keeps its default. An unknown key, a key set twice or a bad value stops \
            the program at start-up with a message naming the key and its line; `ens-fcgi --check` \
            checks a file without starting anything.

            Secrets never go into this file: the *_file keys name files that hold them, one value \
            per file, surrounding whitespace ignored.

            /usr/share/ens/ens.conf.example lists every key with its default and the same text.
            """)
        out += [".SH RELOADING"]
        let everyProcess = ConfigSchema.keys.filter { $0.reload == .everyProcess }.map(\.name)
        let responders = ConfigSchema.keys.filter { $0.reload == .responders }.map(\.name)
        out += roff("""
            SIGHUP (systemctl reload) makes every ENS process read the file again. A file with an \
            error is logged and the running configuration kept. Every process applies \
            \(everyProcess.joined(separator: ", ")); the responders (ens-fcgi) also apply \
            \(responders.joined(separator: ", ")). Every other changed key is logged as needing \
            a restart.
            """)
        for section in ConfigSchema.sections {
            out.append(".SH \"\(escape(section.title.uppercased()))\"")
            if !section.intro.isEmpty { out += roff(section.intro) }
            for key in section.keys {
                out += [".TP", ".B \(escape(key.name))"]
                out += roff(paragraphs(key.doc, key.details), continued: true)
                let value = key.defaultValue.map { $0.isEmpty ? "empty" : "\\fB\(escape($0))\\fR" } ?? "unset"
                out += [".IP"] + roff("Value: \(key.summary). Default: \(value).\(reloadNote(key.reload))", escaped: false)
            }
            for pattern in section.patterns {
                out += [".TP", ".B \(escape(pattern.name))"]
                out += roff(paragraphs(pattern.doc, pattern.details), continued: true)
                out += [".IP"] + roff("Value: \(pattern.summary). For example:")
                out += [".nf"] + pattern.examples.map { "  " + escape($0) } + [".fi"]
            }
        }
        out += [".SH \"DEPRECATED KEYS\""]
        out += roff("""
            Old names still accepted, each as its new key. Each program logs a warning at start-up \
            for every old name the file uses; a file that sets a key under both names is refused. \
            Rename them: the old names will go.
            """)
        for alias in ConfigSchema.aliases {
            out += [".TP", ".B \(escape(alias.old))", "Now \\fB\(escape(alias.new))\\fR: \(escape(alias.note))."]
        }
        out += [
            ".SH FILES",
            ".TP", ".I /etc/ens/ens.conf", "The configuration file (mode 0640 root:ens).",
            ".TP", ".I /usr/share/ens/ens.conf.example", "Every key with its default.",
            ".SH SEE ALSO",
            ".BR ens-fcgi (1),",
            ".BR ens-sender (1),",
            ".BR ens-cron (1)",
        ]
        return out.joined(separator: "\n") + "\n"
    }

    /// Paragraphs as roff: text filled by the formatter (one sentence per line is not
    /// needed), verbatim blocks in .nf/.fi. `continued`: the first paragraph follows a
    /// tag (.TP), so later ones start with .IP rather than .PP.
    private static func roff(_ text: String, continued: Bool = false, escaped: Bool = true) -> [String] {
        var lines: [String] = []
        for (index, paragraph) in blocks(text).enumerated() {
            if index > 0 && paragraph.startsParagraph { lines.append(continued ? ".IP" : ".PP") }
            switch paragraph.block {
            case .text(let words):
                lines += wrap(words, width: 80).map { line in
                    let text = escaped ? escape(line) : line
                    return text.hasPrefix(".") || text.hasPrefix("'") ? "\\&" + text : text
                }
            case .verbatim(let verbatim): lines += [".nf"] + verbatim.map(escape) + [".fi"]
            }
        }
        return lines
    }

    private static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "\\": out += "\\e"
            case "-": out += "\\-"
            default: out.append(character)
            }
        }
        return out
    }

    // MARK: Text

    private enum Block {
        case text([Substring])
        case verbatim([String])
    }

    /// A block, and whether a blank line comes before it (false: it continues the
    /// paragraph before, as an example inside it does).
    private typealias Paragraph = (block: Block, startsParagraph: Bool)

    private static func paragraphs(_ doc: String, _ details: String) -> String {
        guard !details.isEmpty else { return doc }
        // The doc and the first paragraph of the details read as one paragraph.
        return doc + " " + details
    }

    /// Splits text into paragraphs at blank lines; a run of lines indented by two spaces
    /// is a verbatim block.
    private static func blocks(_ text: String) -> [Paragraph] {
        var result: [Paragraph] = []
        var words: [Substring] = []
        var verbatim: [String] = []
        var blank = true
        func flushWords() {
            if !words.isEmpty { result.append((.text(words), blank)); blank = false }
            words = []
        }
        func flushVerbatim() {
            if !verbatim.isEmpty { result.append((.verbatim(verbatim), blank)); blank = false }
            verbatim = []
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.trimmingCharacters(in: " ").isEmpty {
                flushWords()
                flushVerbatim()
                blank = true
            } else if line.hasPrefix("  ") {
                flushWords()
                verbatim.append(String(line))
            } else {
                flushVerbatim()
                words += line.split(separator: " ")
            }
        }
        flushWords()
        flushVerbatim()
        return result
    }

    private static func wrap(_ words: [Substring], width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in words {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        if !line.isEmpty { lines.append(line) }
        return lines
    }
}
