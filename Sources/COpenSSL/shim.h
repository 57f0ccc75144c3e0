// OpenSSL 3 (libcrypto). Only the OpenSSL wrapper module imports this.
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
// refuse a bundle before PKCS12_parse would spend minutes on it.

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

// The largest iteration count PKCS12_parse would run for this bundle: the MAC's, each
// encrypted safe's, each shrouded key's. An encrypted safe is opened (to find the keys
// inside) only after its own count passed `limit`. -1 when a KDF is not one this can
// bound, the password does not open a safe, or the bundle has a shape it does not know.
static inline long copenssl_pkcs12_max_iterations(PKCS12 *_Nonnull bundle, const char *_Nonnull password, long limit) {
    long most = 0;
    if (PKCS12_mac_present(bundle)) {
        const ASN1_INTEGER *macIterations = NULL;
        PKCS12_get0_mac(NULL, NULL, NULL, &macIterations, bundle);
        most = macIterations == NULL ? 1 : ASN1_INTEGER_get(macIterations);
        if (most < 0 || most > limit) return most;
    }
    // As PKCS12_parse does: an empty password may mean "none" or "the empty string".
    const char *pass = password;
    if (*password == '\0') pass = (!PKCS12_mac_present(bundle) || PKCS12_verify_mac(bundle, NULL, 0)) ? NULL : "";
    STACK_OF(PKCS7) *safes = PKCS12_unpack_authsafes(bundle);
    if (safes == NULL) return -1;
    for (int i = 0; i < sk_PKCS7_num(safes) && most >= 0 && most <= limit; i++) {
        PKCS7 *safe = sk_PKCS7_value(safes, i);
        STACK_OF(PKCS12_SAFEBAG) *bags = NULL;
        int kind = OBJ_obj2nid(safe->type);
        if (kind == NID_pkcs7_data) {
            bags = PKCS12_unpack_p7data(safe);
        } else if (kind == NID_pkcs7_encrypted && safe->d.encrypted != NULL && safe->d.encrypted->enc_data != NULL) {
            long iterations = copenssl_pbe_iterations(safe->d.encrypted->enc_data->algorithm);
            if (iterations < 0 || iterations > limit) { most = iterations; break; }
            if (iterations > most) most = iterations;
            bags = PKCS12_unpack_p7encdata(safe, pass, -1);
        }
        if (bags == NULL) { most = -1; break; }
        for (int j = 0; j < sk_PKCS12_SAFEBAG_num(bags); j++) {
            const PKCS12_SAFEBAG *bag = sk_PKCS12_SAFEBAG_value(bags, j);
            int bagKind = PKCS12_SAFEBAG_get_nid(bag);
            if (bagKind == NID_safeContentsBag) { most = -1; break; }
            if (bagKind != NID_pkcs8ShroudedKeyBag) continue;
            const X509_ALGOR *algorithm = NULL;
            X509_SIG_get0(PKCS12_SAFEBAG_get0_pkcs8(bag), &algorithm, NULL);
            long iterations = copenssl_pbe_iterations(algorithm);
            if (iterations < 0) { most = -1; break; }
            if (iterations > most) most = iterations;
        }
        sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
    }
    sk_PKCS7_pop_free(safes, PKCS7_free);
    return most;
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
