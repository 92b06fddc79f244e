#ifndef AUTH_CLIBPQ_SHIM_H
#define AUTH_CLIBPQ_SHIM_H

#include <libpq-fe.h>

#endif
