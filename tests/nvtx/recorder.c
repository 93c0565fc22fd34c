/*
 * A recording NVTX injection library for tests/nvtx: what Nsight Systems is to NVTX, in 150
 * lines. NVTX3 (compiled into warpnorm by nvtx-sys) loads the library named by
 * NVTX_INJECTION64_PATH on its first call and calls InitializeInjectionNvtx2 with a function
 * that returns its export tables; we ask for the CORE and CORE2 (domain) function tables and
 * fill the slots of the calls we record. Every event becomes one line on stderr, written with
 * a single write() so that it interleaves in order with the emulated driver's kernel lines
 * (SIMCUDA_TRACE=1) of the same thread:
 *
 *   nvtx: domain_create <domain>
 *   nvtx: push <domain> <tid> <depth> <argb hex> <message>
 *   nvtx: pop <domain> <tid> <depth>            (depth after the pop; -1: nothing to pop)
 *   nvtx: global_push <tid> <message> / global_pop <tid> / mark <domain> <message>
 *
 * The ABI (ids, struct layouts) is NVTX3's public injection interface (nvtxDetail/nvtxTypes.h
 * and nvToolsExt.h of the NVTX repository), declared here so that the test needs no headers.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/syscall.h>

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;
typedef struct {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, NvtxFunctionTable *out_table, unsigned int *out_size);
} NvtxExportTableCallbacks;
typedef const void *(*NvtxGetExportTableFunc_t)(uint32_t exportTableId);

enum { ETID_CALLBACKS = 1, MODULE_CORE = 1, MODULE_CORE2 = 5 };
enum { CORE_MarkA = 2, CORE_RangePushEx = 8, CORE_RangePushA = 9, CORE_RangePop = 11 };
enum {
    CORE2_DomainMarkEx = 1,
    CORE2_DomainRangePushEx = 4,
    CORE2_DomainRangePop = 5,
    CORE2_DomainCreateA = 12,
    CORE2_DomainDestroy = 14,
};
enum { MESSAGE_TYPE_ASCII = 1 };

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    union { uint64_t u; int64_t i; double d; } payload;
    int32_t messageType;
    union { const char *ascii; const void *other; } message;
} EventAttributes;

typedef struct Domain { char name[64]; } Domain;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int depth; /* ranges open on this thread (all domains) */

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
    char line[1024];
    int n = snprintf(line, sizeof line, "nvtx: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    pthread_mutex_lock(&lock);
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
    pthread_mutex_unlock(&lock);
}

static long tid(void) { return (long)syscall(SYS_gettid); }

static const char *text(const EventAttributes *a) {
    if (!a) return "(null attributes)";
    if (a->messageType != MESSAGE_TYPE_ASCII) return "(not an ASCII message)";
    return a->message.ascii ? a->message.ascii : "(null message)";
}

static const char *name_of(void *domain) { return domain ? ((Domain *)domain)->name : "(null)"; }

static void *domain_create(const char *name) {
    Domain *d = calloc(1, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name ? name : "(null)");
    emit("domain_create %s", d->name);
    return d;
}

static void domain_destroy(void *domain) { emit("domain_destroy %s", name_of(domain)); }

static int domain_push(void *domain, const EventAttributes *a) {
    int level = depth++;
    emit("push %s %ld %d %s%08x %s", name_of(domain), tid(), level,
         a && a->colorType == 1 ? "argb:" : "nocolor:", a ? a->color : 0u, text(a));
    return level;
}

static int domain_pop(void *domain) {
    if (depth == 0) {
        emit("pop %s %ld -1", name_of(domain), tid());
        return -1;
    }
    int level = --depth;
    emit("pop %s %ld %d", name_of(domain), tid(), level);
    return level;
}

static void domain_mark(void *domain, const EventAttributes *a) { emit("mark %s %s", name_of(domain), text(a)); }
static int global_push_ex(const EventAttributes *a) { emit("global_push %ld %s", tid(), text(a)); return depth++; }
static int global_push_a(const char *m) { emit("global_push %ld %s", tid(), m ? m : "(null)"); return depth++; }
static int global_pop(void) { emit("global_pop %ld", tid()); return depth > 0 ? --depth : -1; }
static void global_mark(const char *m) { emit("mark - %s", m ? m : "(null)"); }

static int fill(const NvtxExportTableCallbacks *cb, int module, unsigned int id, NvtxFunctionPointer f) {
    NvtxFunctionTable table = 0;
    unsigned int size = 0;
    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table || id >= size || !table[id]) return 0;
    *table[id] = f;
    return 1;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    const NvtxExportTableCallbacks *cb = get_export_table(ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb) {
        emit("init failed: no callbacks export table");
        return 0;
    }
    int ok = fill(cb, MODULE_CORE2, CORE2_DomainCreateA, (NvtxFunctionPointer)domain_create)
          && fill(cb, MODULE_CORE2, CORE2_DomainDestroy, (NvtxFunctionPointer)domain_destroy)
          && fill(cb, MODULE_CORE2, CORE2_DomainRangePushEx, (NvtxFunctionPointer)domain_push)
          && fill(cb, MODULE_CORE2, CORE2_DomainRangePop, (NvtxFunctionPointer)domain_pop)
          && fill(cb, MODULE_CORE2, CORE2_DomainMarkEx, (NvtxFunctionPointer)domain_mark)
          && fill(cb, MODULE_CORE, CORE_RangePushEx, (NvtxFunctionPointer)global_push_ex)
          && fill(cb, MODULE_CORE, CORE_RangePushA, (NvtxFunctionPointer)global_push_a)
          && fill(cb, MODULE_CORE, CORE_RangePop, (NvtxFunctionPointer)global_pop)
          && fill(cb, MODULE_CORE, CORE_MarkA, (NvtxFunctionPointer)global_mark);
    emit(ok ? "init ok" : "init failed: a function table slot is missing");
    return ok;
}
