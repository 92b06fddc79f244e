#ifndef AUTH_CCRYPT_SHIM_H
#define AUTH_CCRYPT_SHIM_H

#include <crypt.h>
#include <stdlib.h>
#include <string.h>

/// crypt_r with its 32 KiB working area on the heap; returns 0 and fills `out` (NUL-terminated) on
/// success, -1 when libxcrypt refuses the setting. `out` must hold CRYPT_OUTPUT_SIZE bytes.
static inline int ccrypt_shim_crypt(const char *phrase, const char *setting, char *out, size_t out_size) {
    struct crypt_data *data = calloc(1, sizeof(struct crypt_data));
    if (data == NULL) return -1;
    const char *result = crypt_r(phrase, setting, data);
    int status = -1;
    if (result != NULL && result[0] != '*' && strlen(result) < out_size) {
        memcpy(out, result, strlen(result) + 1);
        status = 0;
    }
    explicit_bzero(data, sizeof(struct crypt_data));
    free(data);
    return status;
}

#endif
