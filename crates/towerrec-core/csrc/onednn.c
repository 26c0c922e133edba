/*
 * The few calls of oneDNN's C API that towerrec's bf16 matrix products make (the
 * `onednn` feature of towerrec-core; src/matmul/onednn.rs is the Rust side and
 * docs/CONFIG.md, `model.dense_precision`, the user's page).
 *
 * oneDNN 2.x passes its descriptors as C structs by pointer; compiling these calls
 * against the installed headers keeps their layout out of the Rust code. One primitive
 * per shape: c (m x n, f32, row-major) = op(a) (m x k) . op(b) (k x n), the operands
 * bf16 (or f32, `bf16 = 0`: the same calls on any CPU, for tests), plus c when
 * `accumulate` (a sum post-op), each operand read through its strides so that a
 * transposed operand is never copied.
 */
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenMP, which Debian's libdnnl runs its threads on: the team size of the calling
 * thread's next parallel region. */
extern void omp_set_num_threads(int);

struct towerrec_dnnl_matmul {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
};

static void say(char *err, size_t len, const char *what, dnnl_status_t s) {
    if (err && len) snprintf(err, len, "%s failed (dnnl_status_t %d)", what, (int)s);
}

#define TRY(call, what)                   \
    do {                                  \
        dnnl_status_t s_ = (call);        \
        if (s_ != dnnl_success) {         \
            say(err, err_len, what, s_);  \
            towerrec_dnnl_matmul_destroy(mm); \
            return NULL;                  \
        }                                 \
    } while (0)

void towerrec_dnnl_matmul_destroy(struct towerrec_dnnl_matmul *mm) {
    if (!mm) return;
    if (mm->a) dnnl_memory_destroy(mm->a);
    if (mm->b) dnnl_memory_destroy(mm->b);
    if (mm->c) dnnl_memory_destroy(mm->c);
    if (mm->prim) dnnl_primitive_destroy(mm->prim);
    if (mm->pd) dnnl_primitive_desc_destroy(mm->pd);
    if (mm->stream) dnnl_stream_destroy(mm->stream);
    if (mm->engine) dnnl_engine_destroy(mm->engine);
    free(mm);
}

struct towerrec_dnnl_matmul *towerrec_dnnl_matmul_create(int64_t m, int64_t n, int64_t k,
        int trans_a, int trans_b, int accumulate, int bf16, char *err, size_t err_len) {
    struct towerrec_dnnl_matmul *mm = calloc(1, sizeof *mm);
    if (!mm) {
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return NULL;
    }
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_dims_t a_dims = {m, k}, b_dims = {k, n}, c_dims = {m, n};
    dnnl_dims_t a_strides = {trans_a ? 1 : k, trans_a ? m : 1};
    dnnl_dims_t b_strides = {trans_b ? 1 : n, trans_b ? k : 1};
    dnnl_dims_t c_strides = {n, 1};
    TRY(dnnl_engine_create(&mm->engine, dnnl_cpu, 0), "dnnl_engine_create");
    TRY(dnnl_stream_create(&mm->stream, mm->engine, dnnl_stream_default_flags),
            "dnnl_stream_create");
    dnnl_data_type_t operands = bf16 ? dnnl_bf16 : dnnl_f32;
    TRY(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, operands, a_strides),
            "the memory descriptor of a");
    TRY(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, operands, b_strides),
            "the memory descriptor of b");
    TRY(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides),
            "the memory descriptor of c");
    dnnl_matmul_desc_t desc;
    TRY(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md), "dnnl_matmul_desc_init");
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    TRY(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create");
    if (accumulate) {
        dnnl_status_t s = dnnl_post_ops_create(&ops);
        if (s == dnnl_success) s = dnnl_post_ops_append_sum(ops, 1.0f);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, ops);
        if (ops) dnnl_post_ops_destroy(ops);
        if (s != dnnl_success) {
            dnnl_primitive_attr_destroy(attr);
            say(err, err_len, "the sum post-op", s);
            towerrec_dnnl_matmul_destroy(mm);
            return NULL;
        }
    }
    dnnl_status_t s = dnnl_primitive_desc_create(&mm->pd, &desc, attr, mm->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) {
        say(err, err_len,
                s == dnnl_unimplemented
                        ? "dnnl_primitive_desc_create: no implementation on this CPU"
                        : "dnnl_primitive_desc_create",
                s);
        towerrec_dnnl_matmul_destroy(mm);
        return NULL;
    }
    TRY(dnnl_primitive_create(&mm->prim, mm->pd), "dnnl_primitive_create");
    TRY(dnnl_memory_create(&mm->a, &a_md, mm->engine, DNNL_MEMORY_NONE), "memory a");
    TRY(dnnl_memory_create(&mm->b, &b_md, mm->engine, DNNL_MEMORY_NONE), "memory b");
    TRY(dnnl_memory_create(&mm->c, &c_md, mm->engine, DNNL_MEMORY_NONE), "memory c");
    return mm;
}

/* The implementation oneDNN chose, e.g. "brg:avx512_core_amx" or "ref:any". */
const char *towerrec_dnnl_matmul_impl(const struct towerrec_dnnl_matmul *mm) {
    const char *name = NULL;
    if (dnnl_primitive_desc_query(mm->pd, dnnl_query_impl_info_str, 0, &name)
            != dnnl_success)
        return "";
    return name ? name : "";
}

/* Runs the product on `threads` OpenMP threads; returns a dnnl_status_t. */
int towerrec_dnnl_matmul_run(struct towerrec_dnnl_matmul *mm, const void *a,
        const void *b, float *c, int threads) {
    dnnl_status_t s;
    if ((s = dnnl_memory_set_data_handle(mm->a, (void *)a)) != dnnl_success) return s;
    if ((s = dnnl_memory_set_data_handle(mm->b, (void *)b)) != dnnl_success) return s;
    if ((s = dnnl_memory_set_data_handle(mm->c, c)) != dnnl_success) return s;
    dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_SRC, mm->a}, {DNNL_ARG_WEIGHTS, mm->b}, {DNNL_ARG_DST, mm->c}};
    omp_set_num_threads(threads > 0 ? threads : 1);
    if ((s = dnnl_primitive_execute(mm->prim, mm->stream, 3, args)) != dnnl_success)
        return s;
    return dnnl_stream_wait(mm->stream);
}

/* The instruction set oneDNN dispatches to on this CPU (dnnl_cpu_isa_t). */
int towerrec_dnnl_isa(void) { return (int)dnnl_get_effective_cpu_isa(); }

/* "major.minor.patch" of the loaded library. */
void towerrec_dnnl_version(char *out, size_t len) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(out, len, "%d.%d.%d", v->major, v->minor, v->patch);
}
