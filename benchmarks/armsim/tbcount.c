/*
 * tbcount.c: a TCG plugin for the dynamic qemu-aarch64 (QEMU 7.2, plugin API 1) that counts how
 * often each translated block runs inside marked regions, for benchmarks/arm_estimate.py.
 *
 * A guest marks a region with the syscall number 4242 (qemu answers ENOSYS; nothing else
 * happens): a1=1 opens it, a1=0 closes it. Every translated block carries one inline 64-bit add
 * per execution (cheap: no callback); at a region's edges the counters are snapshotted, so only
 * the work between the marks is counted (not Python's start-up, imports or the warm-up run).
 *
 * Args:  out=FILE   at exit, one line per block that ran inside a region:
 *                     ADDRESS N_INSNS COUNT WORD...   (hex address, hex instruction words)
 *                   after a header "# regions R"
 * Build: gcc -O2 -shared -fPIC -o libtbcount.so tbcount.c
 * Limit: one counter per block, shared by all guest threads: run the workload on one thread.
 */
#include "qemu_plugin.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

enum { MARK_SYSCALL = 4242, BUCKETS = 1 << 20 };

typedef struct block {
    uint64_t executed;            /* the inline add's target: every execution, whole run */
    uint64_t at_open, in_regions;  /* snapshot when a region opened; sum over closed regions */
    uint64_t address, hash;
    uint32_t n;
    uint32_t *words;
    struct block *next_in_bucket;
} block;

static block **buckets;
static block **blocks;
static size_t n_blocks, cap_blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *out_path;
static int region_open, regions;

static uint64_t fnv1a(const uint32_t *w, size_t n, uint64_t address)
{
    uint64_t h = 14695981039346656037ull ^ address;
    for (size_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The same address may be translated again (code unloaded and reloaded, or the cache
 * flushed): blocks are told apart by address and contents, and a retranslation of the same
 * block reuses its record. */
static block *lookup(uint64_t address, const uint32_t *w, uint32_t n)
{
    uint64_t h = fnv1a(w, n, address);
    block **slot = &buckets[h & (BUCKETS - 1)];
    for (block *b = *slot; b; b = b->next_in_bucket)
        if (b->hash == h && b->address == address && b->n == n && !memcmp(b->words, w, 4 * n))
            return b;
    block *b = calloc(1, sizeof *b);
    b->address = address;
    b->hash = h;
    b->n = n;
    b->words = malloc(4 * n);
    memcpy(b->words, w, 4 * n);
    b->next_in_bucket = *slot;
    *slot = b;
    if (n_blocks == cap_blocks) {
        cap_blocks = cap_blocks ? 2 * cap_blocks : 1 << 16;
        blocks = realloc(blocks, cap_blocks * sizeof *blocks);
    }
    blocks[n_blocks++] = b;
    return b;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    uint32_t *w = malloc(4 * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        memcpy(&w[i], qemu_plugin_insn_data(qemu_plugin_tb_get_insn(tb, i)), 4);
    pthread_mutex_lock(&lock);
    block *b = lookup(qemu_plugin_tb_vaddr(tb), w, (uint32_t)n);
    pthread_mutex_unlock(&lock);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->executed, 1);
    free(w);
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1, uint64_t a2,
                       uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8)
{
    if (num != MARK_SYSCALL)
        return;
    pthread_mutex_lock(&lock);
    if (a1 && !region_open) {
        for (size_t i = 0; i < n_blocks; i++)
            blocks[i]->at_open = blocks[i]->executed;
        region_open = 1;
    } else if (!a1 && region_open) {
        for (size_t i = 0; i < n_blocks; i++)
            blocks[i]->in_regions += blocks[i]->executed - blocks[i]->at_open;
        region_open = 0;
        regions++;
    }
    pthread_mutex_unlock(&lock);
}

static void on_exit_(qemu_plugin_id_t id, void *unused)
{
    FILE *f = out_path ? fopen(out_path, "w") : NULL;
    if (!f) {
        qemu_plugin_outs("tbcount: cannot write the out= file\n");
        return;
    }
    fprintf(f, "# regions %d\n", regions);
    for (size_t i = 0; i < n_blocks; i++) {
        block *b = blocks[i];
        if (!b->in_regions)
            continue;
        fprintf(f, "%" PRIx64 " %u %" PRIu64, b->address, b->n, b->in_regions);
        for (uint32_t k = 0; k < b->n; k++)
            fprintf(f, " %08x", b->words[k]);
        fputc('\n', f);
    }
    fclose(f);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "out=", 4)) {
            out_path = strdup(argv[i] + 4);
        } else {
            fprintf(stderr, "tbcount: unknown argument %s (takes out=FILE)\n", argv[i]);
            return -1;
        }
    }
    if (!out_path) {
        fprintf(stderr, "tbcount: out=FILE is required\n");
        return -1;
    }
    buckets = calloc(BUCKETS, sizeof *buckets);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    qemu_plugin_register_atexit_cb(id, on_exit_, NULL);
    return 0;
}
