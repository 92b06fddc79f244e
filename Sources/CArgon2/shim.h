#ifndef AUTH_CARGON2_SHIM_H
#define AUTH_CARGON2_SHIM_H

#include <argon2.h>

#endif
