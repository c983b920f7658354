// mk_error.c: the thread-local last-error message of the C ABI.
#include "mpskern.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char mk_err_buf[4096];

const char *mk_last_error(void) { return mk_err_buf; }

mk_status mk_set_error(mk_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mk_err_buf, sizeof mk_err_buf, fmt, ap);
    va_end(ap);
    return st;
}
