// OpenSSL 3 (libcrypto). Only the OpenSSL wrapper module imports this.
#include <string.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/pkcs12.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/sha.h>
#include <openssl/pkcs7.h>

// PKCS#12 bundles come from clients and choose their own key-derivation iteration
// counts; these read the counts without running any KDF, so the OpenSSL wrapper can
// refuse a bundle before opening it would spend minutes on it.

// The iterations a PBE AlgorithmIdentifier asks for: PKCS#12/PKCS#5 v1 PBE (PBEPARAM)
// or PBES2 with PBKDF2; -1 for anything else (scrypt, an unknown scheme, malformed).
static inline long copenssl_pbe_iterations(const X509_ALGOR *_Nullable algorithm) {
    if (algorithm == NULL) return -1;
    const ASN1_OBJECT *oid = NULL;
    int type = 0;
    const void *value = NULL;
    X509_ALGOR_get0(&oid, &type, &value, algorithm);
    if (type != V_ASN1_SEQUENCE || value == NULL) return -1;
    if (OBJ_obj2nid(oid) == NID_pbes2) {
        PBE2PARAM *pbes2 = ASN1_item_unpack((const ASN1_STRING *)value, ASN1_ITEM_rptr(PBE2PARAM));
        if (pbes2 == NULL) return -1;
        long iterations = -1;
        const ASN1_OBJECT *kdf = NULL;
        int kdfType = 0;
        const void *kdfValue = NULL;
        X509_ALGOR_get0(&kdf, &kdfType, &kdfValue, pbes2->keyfunc);
        if (OBJ_obj2nid(kdf) == NID_id_pbkdf2 && kdfType == V_ASN1_SEQUENCE && kdfValue != NULL) {
            PBKDF2PARAM *pbkdf2 = ASN1_item_unpack((const ASN1_STRING *)kdfValue, ASN1_ITEM_rptr(PBKDF2PARAM));
            if (pbkdf2 != NULL) {
                iterations = ASN1_INTEGER_get(pbkdf2->iter);
                PBKDF2PARAM_free(pbkdf2);
            }
        }
        PBE2PARAM_free(pbes2);
        return iterations;
    }
    PBEPARAM *pbe = ASN1_item_unpack((const ASN1_STRING *)value, ASN1_ITEM_rptr(PBEPARAM));
    if (pbe == NULL) return -1;
    long iterations = ASN1_INTEGER_get(pbe->iter);
    PBEPARAM_free(pbe);
    return iterations;
}

// What opening a client's PKCS#12 bundle costs and did. Each key derivation (the
// MAC's, an encrypted safe's, a shrouded key's) runs as many iterations as the bundle
// asks, so a bundle of a few KB with a hundred encrypted safes, each under the
// per-derivation cap, could still cost seconds of CPU: the iterations of every
// derivation the bundle can ask for are summed against a budget before any runs.
typedef struct {
    long planned;      // iterations counted before any derivation ran (and later key bags)
    long asked;        // the count that broke a limit (one derivation's, or the sum)
    long derivations;  // key derivations actually started
} copenssl_pkcs12_cost;

// What copenssl_pkcs12_open answers (macros, so Swift sees plain Int32 constants).
#define COPENSSL_PKCS12_OK 0
#define COPENSSL_PKCS12_MALFORMED 1       /* not a shape this reads (nested safes, no MAC with a password) */
#define COPENSSL_PKCS12_UNBOUNDED 2       /* a KDF whose cost cannot be read beforehand (scrypt, unknown) */
#define COPENSSL_PKCS12_OVER_CAP 3        /* one derivation asks for more than the cap */
#define COPENSSL_PKCS12_OVER_BUDGET 4     /* the derivations together ask for more than the budget */
#define COPENSSL_PKCS12_WRONG_PASSWORD 5
#define COPENSSL_PKCS12_FAILED 6          /* OpenSSL failed (its error queue says why) */

// Adds one derivation of `iterations` to the plan: refused when it is not boundable,
// over the cap, or takes the sum over the budget.
static inline int copenssl_pkcs12_charge(copenssl_pkcs12_cost *_Nonnull cost, long iterations, long cap, long budget) {
    if (iterations < 0) return COPENSSL_PKCS12_UNBOUNDED;
    if (iterations > cap) { cost->asked = iterations; return COPENSSL_PKCS12_OVER_CAP; }
    cost->planned += iterations;  // each term is at most `cap`: no overflow before the check
    if (cost->planned > budget) { cost->asked = cost->planned; return COPENSSL_PKCS12_OVER_BUDGET; }
    return COPENSSL_PKCS12_OK;
}

// The iterations of a shrouded key bag's encryption, or -1 when unreadable.
static inline long copenssl_pkcs12_shrouded_iterations(const PKCS12_SAFEBAG *_Nonnull bag) {
    const X509_ALGOR *algorithm = NULL;
    const X509_SIG *shrouded = PKCS12_SAFEBAG_get0_pkcs8(bag);
    if (shrouded == NULL) return -1;
    X509_SIG_get0(shrouded, &algorithm, NULL);
    return copenssl_pbe_iterations(algorithm);
}

// Charges every derivation visible without running one: the MAC (twice for an empty
// password, which PKCS#12 tries as "none" and as "the empty string"), each encrypted
// safe, and each shrouded key in a plain safe. A shrouded key inside an encrypted safe
// is only visible once that safe is open; opening charges it before decrypting it.
static inline int copenssl_pkcs12_plan(PKCS12 *_Nonnull bundle, int emptyPassword, long cap, long budget,
                                       copenssl_pkcs12_cost *_Nonnull cost) {
    int status = COPENSSL_PKCS12_OK;
    if (PKCS12_mac_present(bundle)) {
        const ASN1_INTEGER *macIterations = NULL;
        PKCS12_get0_mac(NULL, NULL, NULL, &macIterations, bundle);
        long iterations = macIterations == NULL ? 1 : ASN1_INTEGER_get(macIterations);
        for (int tries = emptyPassword ? 2 : 1; tries > 0 && status == COPENSSL_PKCS12_OK; tries--) {
            status = copenssl_pkcs12_charge(cost, iterations, cap, budget);
        }
        if (status != COPENSSL_PKCS12_OK) return status;
    }
    STACK_OF(PKCS7) *safes = PKCS12_unpack_authsafes(bundle);
    if (safes == NULL) return COPENSSL_PKCS12_MALFORMED;
    for (int i = 0; i < sk_PKCS7_num(safes) && status == COPENSSL_PKCS12_OK; i++) {
        PKCS7 *safe = sk_PKCS7_value(safes, i);
        int kind = OBJ_obj2nid(safe->type);
        if (kind == NID_pkcs7_encrypted) {
            if (safe->d.encrypted == NULL || safe->d.encrypted->enc_data == NULL) { status = COPENSSL_PKCS12_MALFORMED; break; }
            status = copenssl_pkcs12_charge(cost, copenssl_pbe_iterations(safe->d.encrypted->enc_data->algorithm), cap, budget);
        } else if (kind == NID_pkcs7_data) {
            STACK_OF(PKCS12_SAFEBAG) *bags = PKCS12_unpack_p7data(safe);
            if (bags == NULL) { status = COPENSSL_PKCS12_MALFORMED; break; }
            for (int j = 0; j < sk_PKCS12_SAFEBAG_num(bags) && status == COPENSSL_PKCS12_OK; j++) {
                const PKCS12_SAFEBAG *bag = sk_PKCS12_SAFEBAG_value(bags, j);
                if (PKCS12_SAFEBAG_get_nid(bag) == NID_pkcs8ShroudedKeyBag) {
                    status = copenssl_pkcs12_charge(cost, copenssl_pkcs12_shrouded_iterations(bag), cap, budget);
                }
            }
            sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
        }
        // Other content types PKCS12_parse skips too (it has no key for enveloped data).
    }
    sk_PKCS7_pop_free(safes, PKCS7_free);
    return status;
}

// One safe's bags, as PKCS12_parse takes them: the first key (plain or shrouded; later
// ones are skipped, undecrypted), and every X.509 certificate. A nested safe is refused:
// its depth and contents could not be planned.
static inline int copenssl_pkcs12_take_bags(const STACK_OF(PKCS12_SAFEBAG) *_Nonnull bags, const char *_Nullable pass,
                                            long cap, long budget, copenssl_pkcs12_cost *_Nonnull cost,
                                            EVP_PKEY *_Nullable *_Nonnull key, STACK_OF(X509) *_Nonnull certificates,
                                            int planned) {
    for (int j = 0; j < sk_PKCS12_SAFEBAG_num(bags); j++) {
        const PKCS12_SAFEBAG *bag = sk_PKCS12_SAFEBAG_value(bags, j);
        switch (PKCS12_SAFEBAG_get_nid(bag)) {
        case NID_safeContentsBag:
            return COPENSSL_PKCS12_MALFORMED;
        case NID_keyBag:
            if (*key == NULL) {
                const PKCS8_PRIV_KEY_INFO *info = PKCS12_SAFEBAG_get0_p8inf(bag);
                if (info == NULL || (*key = EVP_PKCS82PKEY(info)) == NULL) return COPENSSL_PKCS12_FAILED;
            }
            break;
        case NID_pkcs8ShroudedKeyBag: {
            if (*key != NULL) break;
            // A key found inside an encrypted safe was not in the plan: charged now,
            // before its derivation runs.
            if (!planned) {
                int status = copenssl_pkcs12_charge(cost, copenssl_pkcs12_shrouded_iterations(bag), cap, budget);
                if (status != COPENSSL_PKCS12_OK) return status;
            }
            cost->derivations++;
            PKCS8_PRIV_KEY_INFO *info = PKCS12_decrypt_skey(bag, pass, -1);
            if (info == NULL) return COPENSSL_PKCS12_FAILED;
            *key = EVP_PKCS82PKEY(info);
            PKCS8_PRIV_KEY_INFO_free(info);
            if (*key == NULL) return COPENSSL_PKCS12_FAILED;
            break;
        }
        case NID_certBag: {
            if (PKCS12_SAFEBAG_get_bag_nid(bag) != NID_x509Certificate) break;
            X509 *certificate = PKCS12_SAFEBAG_get1_cert(bag);
            if (certificate == NULL) return COPENSSL_PKCS12_FAILED;
            if (!sk_X509_push(certificates, certificate)) { X509_free(certificate); return COPENSSL_PKCS12_FAILED; }
            break;
        }
        default:
            break;
        }
    }
    return COPENSSL_PKCS12_OK;
}

// Opens a client's bundle once, as PKCS12_parse would (which this replaces: run after a
// check of its own, every encrypted safe was decrypted twice), within `cap` iterations
// per derivation and `budget` for all of them together. The plan is made and checked
// before the first derivation; `cost` tells what was planned and run. On success `key`
// and `certificate` are set and `chain` holds the other certificates (all owned by the
// caller); on failure nothing is.
static inline int copenssl_pkcs12_open(PKCS12 *_Nonnull bundle, const char *_Nonnull password, long cap, long budget,
                                       copenssl_pkcs12_cost *_Nonnull cost, EVP_PKEY *_Nullable *_Nonnull key,
                                       X509 *_Nullable *_Nonnull certificate, STACK_OF(X509) *_Nullable *_Nonnull chain) {
    *key = NULL;
    *certificate = NULL;
    *chain = NULL;
    int status = copenssl_pkcs12_plan(bundle, *password == '\0', cap, budget, cost);
    if (status != COPENSSL_PKCS12_OK) return status;

    // The MAC first, as PKCS12_parse does; for an empty password it also tells whether
    // the bundle was made with no password or with the empty one.
    const char *pass = password;
    if (PKCS12_mac_present(bundle)) {
        if (*password == '\0') {
            cost->derivations++;
            if (PKCS12_verify_mac(bundle, NULL, 0)) {
                pass = NULL;
            } else {
                cost->derivations++;
                if (!PKCS12_verify_mac(bundle, "", 0)) return COPENSSL_PKCS12_WRONG_PASSWORD;
            }
        } else {
            cost->derivations++;
            if (!PKCS12_verify_mac(bundle, password, -1)) return COPENSSL_PKCS12_WRONG_PASSWORD;
        }
    } else if (*password != '\0') {
        return COPENSSL_PKCS12_MALFORMED;  // nothing would check the password: refused, as PKCS12_parse does
    } else {
        pass = NULL;
    }

    STACK_OF(PKCS7) *safes = PKCS12_unpack_authsafes(bundle);
    STACK_OF(X509) *certificates = sk_X509_new_null();
    if (safes == NULL || certificates == NULL) status = COPENSSL_PKCS12_FAILED;
    for (int i = 0; status == COPENSSL_PKCS12_OK && i < sk_PKCS7_num(safes); i++) {
        PKCS7 *safe = sk_PKCS7_value(safes, i);
        int kind = OBJ_obj2nid(safe->type);
        STACK_OF(PKCS12_SAFEBAG) *bags = NULL;
        if (kind == NID_pkcs7_data) {
            bags = PKCS12_unpack_p7data(safe);
        } else if (kind == NID_pkcs7_encrypted) {
            cost->derivations++;
            bags = PKCS12_unpack_p7encdata(safe, pass, -1);
        } else {
            continue;
        }
        if (bags == NULL) { status = COPENSSL_PKCS12_FAILED; break; }
        status = copenssl_pkcs12_take_bags(bags, pass, cap, budget, cost, key, certificates, kind == NID_pkcs7_data);
        sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
    }
    if (safes != NULL) sk_PKCS7_pop_free(safes, PKCS7_free);

    // The certificate is the first that matches the key; the others are its chain.
    while (status == COPENSSL_PKCS12_OK && sk_X509_num(certificates) > 0) {
        X509 *candidate = sk_X509_shift(certificates);
        if (*key != NULL && *certificate == NULL) {
            ERR_set_mark();
            int match = X509_check_private_key(candidate, *key);
            ERR_pop_to_mark();
            if (match) { *certificate = candidate; continue; }
        }
        if (*chain == NULL && (*chain = sk_X509_new_null()) == NULL) { X509_free(candidate); status = COPENSSL_PKCS12_FAILED; break; }
        if (!sk_X509_push(*chain, candidate)) { X509_free(candidate); status = COPENSSL_PKCS12_FAILED; }
    }
    if (certificates != NULL) sk_X509_pop_free(certificates, X509_free);
    if (status != COPENSSL_PKCS12_OK) {
        EVP_PKEY_free(*key);
        X509_free(*certificate);
        if (*chain != NULL) sk_X509_pop_free(*chain, X509_free);
        *key = NULL;
        *certificate = NULL;
        *chain = NULL;
    }
    return status;
}

/* A stack of certificates (PKCS12_parse's CA certificates): its size, one member
 * (borrowed), and freeing it with its members. The sk_X509_* names are macros. */
static inline int copenssl_x509_stack_count(STACK_OF(X509) *_Nullable stack) {
    return stack == NULL ? 0 : sk_X509_num(stack);
}

static inline X509 *_Nullable copenssl_x509_stack_value(STACK_OF(X509) *_Nonnull stack, int index) {
    return sk_X509_value(stack, index);
}

static inline void copenssl_x509_stack_free(STACK_OF(X509) *_Nullable stack) {
    if (stack != NULL) sk_X509_pop_free(stack, X509_free);
}

// SHA-256 and HMAC-SHA-256 over OpenSSL's own SHA-256 block functions. OpenSSL 3's
// one-shot calls (SHA256(), HMAC(), EVP_Digest) go through the provider layer on every
// call: a method-store look-up, context allocations and frees that cost several times
// hashing a short input, and a check-in computes ten HMACs (Digest.swift). The
// SHA256_* functions are deprecated in 3.0 only in favour of that layer; they are the
// same code underneath.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline void copenssl_sha256(const unsigned char *_Nullable data, size_t length, unsigned char *_Nonnull out) {
    SHA256_CTX context;
    SHA256_Init(&context);
    SHA256_Update(&context, data, length);
    SHA256_Final(out, &context);
    OPENSSL_cleanse(&context, sizeof context);
}

static inline void copenssl_hmac_sha256(const unsigned char *_Nullable key, size_t keyLength,
                                        const unsigned char *_Nullable message, size_t messageLength,
                                        unsigned char *_Nonnull out) {
    unsigned char block[64] = {0};
    unsigned char pad[64];
    unsigned char inner[32];
    if (keyLength > 64) {
        copenssl_sha256(key, keyLength, block);
    } else if (keyLength > 0) {
        memcpy(block, key, keyLength);
    }
    SHA256_CTX context;
    for (int i = 0; i < 64; i++) pad[i] = block[i] ^ 0x36;
    SHA256_Init(&context);
    SHA256_Update(&context, pad, 64);
    SHA256_Update(&context, message, messageLength);
    SHA256_Final(inner, &context);
    for (int i = 0; i < 64; i++) pad[i] = block[i] ^ 0x5c;
    SHA256_Init(&context);
    SHA256_Update(&context, pad, 64);
    SHA256_Update(&context, inner, 32);
    SHA256_Final(out, &context);
    OPENSSL_cleanse(&context, sizeof context);
    OPENSSL_cleanse(block, sizeof block);
    OPENSSL_cleanse(pad, sizeof pad);
    OPENSSL_cleanse(inner, sizeof inner);
}
#pragma GCC diagnostic pop
