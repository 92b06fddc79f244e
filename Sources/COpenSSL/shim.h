#ifndef AUTH_COPENSSL_SHIM_H
#define AUTH_COPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/// BIO_get_mem_data is a macro over BIO_ctrl.
static inline long copenssl_shim_BIO_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }

/// EVP_PKEY_PUBLIC_KEY is an expression macro.
static inline int copenssl_shim_EVP_PKEY_PUBLIC_KEY(void) { return EVP_PKEY_PUBLIC_KEY; }

#endif
