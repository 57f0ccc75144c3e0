#!/usr/bin/env python3
"""B7: are sealed-parameter failures indistinguishable in time? (loopback only)

  timing.py N     one user and device; then N requests of each kind below to
                  /getsubscriptionstatusv2, interleaved at random over one kept-alive
                  HTTPS connection; prints per-kind latency and, for every pair of
                  failure kinds, the two-sample Kolmogorov-Smirnov statistic and p-value.

Kinds: valid (sealed under the user's key), bad-padding (raw RSA of random bytes under
the user's key: what a padding-oracle attacker sends), wrong-key (sealed under another
key), bad-json (good padding, plaintext not JSON), no-field (JSON
without pushToken), bad-length (base64 of a length that is not a multiple of k),
bad-base64 (not base64). Every failure answers the same 400 bytes; the server does one
RSA operation per k bytes whatever the input. Envelopes (`e1:`) are a group of their
own, each one RSA operation and one AES-GCM opening: envelope-bad-padding (the key
block raw RSA of random bytes), envelope-short-key (a well-padded key block of 31
bytes), envelope-bad-tag (the right key, the tag's last byte flipped), envelope-wrong-key
(sealed under another key). The valid kind answers 200 (the status
already tells success from failure, so only failures must be indistinguishable).
Environment: ENS_VAR, ENS_PORT, ENS_TOKEN.
"""
import json
import math
import os
import random
import secrets
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from devices import connection, post, seal, simulator  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding, rsa  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402
import base64  # noqa: E402


def envelope(pem, text, key_block=None, key_length=32, flip_tag=False):
    """`text` as an envelope (docs/api.md, "Sealed parameters"); `key_block` replaces the
    sealed key, `key_length` seals that many bytes of key material, `flip_tag` spoils the tag."""
    key, nonce = os.urandom(32), os.urandom(12)
    public = serialization.load_pem_public_key(pem.encode())
    block = key_block or public.encrypt((key + os.urandom(32))[:key_length], padding.PKCS1v15())
    sealed = bytearray(AESGCM(key).encrypt(nonce, text.encode(), b"ens-envelope/1"))
    if flip_tag:
        sealed[-1] ^= 1
    return "e1:" + base64.b64encode(block + nonce + bytes(sealed)).decode()


def ks(a, b):
    """Two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value."""
    a, b = sorted(a), sorted(b)
    i = j = 0
    d = 0.0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            i += 1
        else:
            j += 1
        d = max(d, abs(i / len(a) - j / len(b)))
    n = len(a) * len(b) / (len(a) + len(b))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, max(0.0, min(1.0, p))


def main(count):
    conn = connection()
    email = f"b7-{secrets.token_hex(4)}@example.test"
    status, answer = post(conn, "/getpublickey", {"email": email})
    assert status == 200, (status, answer)
    userid, pem = answer["userid"], answer["pubKey"]
    # A real registration (proof of possession and Subscribe at the simulator) with the
    # mailbox's own OAuth token at its named EWS URL, as B2's users register: a
    # subscription row ENS did not write itself fails its MAC.
    oauth = f"b7-oauth-{secrets.token_hex(8)}"
    simulator("/mailboxes", {"email": email, "oauthToken": oauth})
    token = secrets.token_hex(32)
    creds = seal(pem, json.dumps({"apnsToken": token, "oauthAccessToken": oauth, "ewsUrl": "https://mail.example.test/EWS/Exchange.asmx"}))
    status, answer = post(conn, "/registerdevicev2", {"userid": userid, "email": email, "bundleid": "com.example.mail", "creds": creds})
    assert answer.get("responseCode") == "UserSubscribed", answer
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    other_pem = other.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    numbers = serialization.load_pem_public_key(pem.encode()).public_numbers()
    k = (numbers.n.bit_length() + 7) // 8
    textbook = pow(int.from_bytes(os.urandom(k), "big") % numbers.n, numbers.e, numbers.n)
    good = json.dumps({"pushToken": token, "lastMessageDate": "01/01/2020 00:00:00.000", "ignoreLastMessageDate": 1})
    kinds = {
        "valid": (seal(pem, good), 200),
        "bad-padding": (base64.b64encode(textbook.to_bytes(k, "big")).decode(), 400),
        "wrong-key": (seal(other_pem, good), 400),
        "bad-json": (seal(pem, "this is not JSON at all"), 400),
        "no-field": (seal(pem, json.dumps({"lastMessageDate": "01/01/2020 00:00:00.000"})), 400),
        "bad-length": (base64.b64encode(os.urandom(255)).decode(), 400),
        "bad-base64": ("!" * 344, 400),
    }
    # The prefix attack (implicit rejection per block): three valid blocks of a JSON
    # prefix the attacker sealed, then a last block whose padding is bad, or good with
    # garbage inside. A parser that walked the prefix only when the last block's padding
    # held would tell the two apart; with per-block stand-ins it walks it either way.
    prefix = seal(pem, ('{"pushToken":"' + token + '","pad":"').ljust(3 * (k - 11), "a"))
    prefix_bytes = base64.b64decode(prefix)
    assert len(prefix_bytes) == 3 * k, len(prefix_bytes)
    garbage = base64.b64decode(seal(pem, "z" * 200))
    prefix_kinds = {
        "prefix-bad-padding": (base64.b64encode(prefix_bytes + textbook.to_bytes(k, "big")).decode(), 400),
        "prefix-bad-json": (base64.b64encode(prefix_bytes + garbage).decode(), 400),
    }
    kinds.update(prefix_kinds)
    envelope_kinds = {
        "envelope-bad-padding": (envelope(pem, good, key_block=textbook.to_bytes(k, "big")), 400),
        "envelope-short-key": (envelope(pem, good, key_length=31), 400),
        "envelope-bad-tag": (envelope(pem, good, flip_tag=True), 400),
        "envelope-wrong-key": (envelope(other_pem, good), 400),
    }
    kinds.update(envelope_kinds)
    order = [kind for kind in kinds for _ in range(count)]
    random.shuffle(order)
    samples = {kind: [] for kind in kinds}
    bodies = set()
    for kind in order[:50]:  # warm-up, not counted
        post(conn, "/getsubscriptionstatusv2", {"userid": userid, "subscriptionPayload": kinds[kind][0]})
    for kind in order:
        payload, expected = kinds[kind]
        start = time.perf_counter()
        conn.request("POST", "/getsubscriptionstatusv2", body=json.dumps({"userid": userid, "subscriptionPayload": payload}),
                     headers={"Content-Type": "application/json", "ApiToken": os.environ["ENS_TOKEN"]})
        response = conn.getresponse()
        body = response.read()
        samples[kind].append((time.perf_counter() - start) * 1e6)
        assert response.status == expected, (kind, response.status, body)
        if expected == 400:
            bodies.add(body)
    print(f"B7 result: {count} requests per kind, {len(bodies)} distinct 400 bodies (must be 1)")
    for kind, values in samples.items():
        values.sort()
        print(f"B7 result: {kind:18s} median {statistics.median(values):7.0f} us  p90 {values[int(len(values) * 0.9)]:7.0f} us")
    # Single-block failures are compared with each other, the two four-block prefix
    # attacks with each other (four blocks cost four RSA operations, as they must), and
    # the envelopes with each other.
    grouped = set(prefix_kinds) | set(envelope_kinds)
    groups = [[k for k in kinds if kinds[k][1] == 400 and k not in grouped], list(prefix_kinds), list(envelope_kinds)]
    worst, pairs = 1.0, 0
    for failures in groups:
        for i, a in enumerate(failures):
            for b in failures[i + 1:]:
                d, p = ks(samples[a], samples[b])
                worst, pairs = min(worst, p), pairs + 1
                print(f"B7 result: KS {a} vs {b}: D={d:.3f} p={p:.3f}")
    # Twenty-two tests at once: by chance alone, one of them falls under 1% in about
    # one run in five. Bonferroni keeps the chance of a false alarm over all of them at 1%.
    threshold = 0.01 / pairs
    print(f"B7 result: smallest p-value between failure kinds {worst:.4f} over {pairs} pairs "
          f"({'indistinguishable' if worst > threshold else 'DISTINGUISHABLE'} at the 1% level, "
          f"Bonferroni: each pair against {threshold:.5f})")
    # For `make bench-check` (bench/lib.sh's figure).
    for name, value in (("b7.distinct_400_bodies", len(bodies)), ("b7.smallest_p_times_pairs", round(worst * pairs, 4))):
        print(f"figure {name} {value}")
        if os.environ.get("BENCH_FIGURES"):
            with open(os.environ["BENCH_FIGURES"], "a") as f:
                f.write(f"{name} {value}\n")
    return 0 if len(bodies) == 1 else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
