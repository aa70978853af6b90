/*
 * Device-to-host copy counter for the GPU check (bench/gpu/check.py): a CUDA injection library.
 *
 * With CUDA_INJECTION64_PATH=<this .so> the CUDA driver loads it into every process that initializes
 * CUDA (tritonserver and each Python-backend stub) and calls InitializeInjection(). It enables CUPTI's
 * activity records for memory copies, which the driver writes for every copy however it was issued
 * (runtime or driver API, statically or dynamically linked runtime), and keeps per-direction totals.
 * A thread flushes the records every 200 ms and rewrites $TP_MEMCPY_DIR/<pid>.txt:
 *
 *     cmdline <the process's command line, NULs as spaces>
 *     <copy kind> <bytes> <copies>      one line per direction seen (HtoD, DtoH, DtoD, PtoP, ...)
 *
 * Build: cc -shared -fPIC -O2 memcpy_counter.c -I<cuda include> -L<cupti lib> -lcupti -lpthread
 */
#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KINDS 16
#define BUFFER_BYTES (4u << 20)

static const char *KIND_NAMES[KINDS] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA",
                                        "DtoD",    "HtoH", "PtoP", "k11",  "k12",  "k13",  "k14",  "k15"};
static _Atomic uint64_t bytes_by_kind[KINDS];
static _Atomic uint64_t copies_by_kind[KINDS];
static char out_path[4096];
static char cmdline[512];

/* Every CUpti_ActivityMemcpy version starts with these fields, in this order. */
typedef struct {
    CUpti_ActivityKind kind;
    uint8_t copyKind, srcKind, dstKind, flags;
    uint64_t bytes;
} memcpy_head;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *record = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY || record->kind == CUPTI_ACTIVITY_KIND_MEMCPY2) {
            const memcpy_head *m = (const memcpy_head *)record;
            unsigned kind = record->kind == CUPTI_ACTIVITY_KIND_MEMCPY2 ? 10u : m->copyKind % KINDS;
            atomic_fetch_add(&bytes_by_kind[kind], m->bytes);
            atomic_fetch_add(&copies_by_kind[kind], 1);
        }
    }
    free(buffer);
}

static void write_counts(void) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "cmdline %s\n", cmdline);
    for (int k = 0; k < KINDS; k++) {
        uint64_t copies = atomic_load(&copies_by_kind[k]);
        if (copies) fprintf(f, "%s %llu %llu\n", KIND_NAMES[k], (unsigned long long)atomic_load(&bytes_by_kind[k]),
                            (unsigned long long)copies);
    }
    fclose(f);
    rename(tmp, out_path);
}

static void *flusher(void *arg) {
    (void)arg;
    for (;;) {
        usleep(200000);
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        write_counts();
    }
    return NULL;
}

static void at_exit(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    write_counts();
}

int InitializeInjection(void) {
    const char *dir = getenv("TP_MEMCPY_DIR");
    if (!dir) return 1;
    snprintf(out_path, sizeof out_path, "%s/%d.txt", dir, (int)getpid());
    FILE *c = fopen("/proc/self/cmdline", "r");
    if (c) {
        size_t n = fread(cmdline, 1, sizeof cmdline - 1, c);
        fclose(c);
        for (size_t i = 0; i < n; i++)
            if (cmdline[i] == '\0' || cmdline[i] == '\n') cmdline[i] = ' ';
        cmdline[n] = '\0';
    }
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 1;
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2);
    write_counts();
    pthread_t thread;
    if (pthread_create(&thread, NULL, flusher, NULL) == 0) pthread_detach(thread);
    atexit(at_exit);
    return 1;
}
