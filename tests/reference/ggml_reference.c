/* tests/reference/ggml_reference.c - writes kappa's GGUF reference data with
 * ggml's own code (libggml-base.so from the npm package
 * @node-llama-cpp/linux-x64, MIT; see tests/data/io/gguf/README.md).
 *
 * Our own program: it declares by hand the few ggml functions it calls, with
 * the signatures of ggml's public headers (ggml.h, gguf.h, and the exported
 * ggml-quants.h row functions), and links against the prebuilt library. Built
 * and run by tests/reference/make_gguf_files.sh, never by CMake or the tests.
 *
 * Output (into the directory given as argv[1]):
 *   ggml_types.txt                 id name block_size type_size for every id
 *   blocks/input.f32               R rows x 256 deterministic floats
 *   blocks/<fmt>.quant.bin         ggml_quantize_chunk of input (also checked
 *                                  equal to quantize_row_<fmt>_ref)
 *   blocks/<fmt>.dequant.f32       ggml's to-float of <fmt>.quant.bin
 *   blocks/<fmt>.random.bin        blocks of pseudo-random bytes (finite scales)
 *   blocks/<fmt>.random_dequant.f32  ggml's to-float of those
 *   <name>.gguf                    written by ggml's gguf writer
 *   <name>.expected.json           what ggml's gguf reader reads back from it
 *   <name>.dequant.f32             each tensor's data as ggml's to-float, in
 *                                  the order of the tensor table
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ggml declarations (facts from ggml.h / gguf.h, version 0.25.1) ---- */
struct ggml_context;
struct ggml_tensor;
struct gguf_context;
struct ggml_init_params {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};
struct gguf_init_params {
  bool no_alloc;
  struct ggml_context** ctx;
};
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12, T_Q6_K = 14, T_BF16 = 30 };
enum {
  G_U8 = 0,
  G_I8,
  G_U16,
  G_I16,
  G_U32,
  G_I32,
  G_F32,
  G_BOOL,
  G_STR,
  G_ARR,
  G_U64,
  G_I64,
  G_F64
};
const char* ggml_type_name(int type);
int64_t ggml_blck_size(int type);
size_t ggml_type_size(int type);
const char* ggml_version(void);
const char* ggml_commit(void);
size_t ggml_quantize_chunk(int type, const float* src, void* dst, int64_t start, int64_t nrows,
                           int64_t n_per_row, const float* imatrix);
void quantize_row_q8_0_ref(const float* x, void* y, int64_t k);
void quantize_row_q4_0_ref(const float* x, void* y, int64_t k);
void quantize_row_q4_K_ref(const float* x, void* y, int64_t k);
void quantize_row_q6_K_ref(const float* x, void* y, int64_t k);
void dequantize_row_q8_0(const void* x, float* y, int64_t k);
void dequantize_row_q4_0(const void* x, float* y, int64_t k);
void dequantize_row_q4_K(const void* x, float* y, int64_t k);
void dequantize_row_q6_K(const void* x, float* y, int64_t k);
void ggml_fp32_to_fp16_row(const float* x, uint16_t* y, int64_t n);
void ggml_fp16_to_fp32_row(const uint16_t* x, float* y, int64_t n);
void ggml_fp32_to_bf16_row_ref(const float* x, uint16_t* y, int64_t n);
void ggml_bf16_to_fp32_row(const uint16_t* x, float* y, int64_t n);
struct ggml_context* ggml_init(struct ggml_init_params params);
void ggml_free(struct ggml_context* ctx);
struct ggml_tensor* ggml_new_tensor(struct ggml_context* ctx, int type, int n_dims,
                                    const int64_t* ne);
struct ggml_tensor* ggml_set_name(struct ggml_tensor* tensor, const char* name);
void* ggml_get_data(const struct ggml_tensor* tensor);
struct ggml_tensor* ggml_get_tensor(struct ggml_context* ctx, const char* name);
int ggml_n_dims(const struct ggml_tensor* tensor);
int64_t ggml_nelements(const struct ggml_tensor* tensor);
/* ggml.h: struct ggml_tensor starts with enum ggml_type type; struct
   ggml_backend_buffer * buffer; int64_t ne[GGML_MAX_DIMS]; ... */
static const int64_t* tensor_ne(const struct ggml_tensor* t) {
  return (const int64_t*)((const char*)t + 16);
}
struct gguf_context* gguf_init_empty(void);
struct gguf_context* gguf_init_from_file(const char* fname, struct gguf_init_params params);
void gguf_free(struct gguf_context* ctx);
uint32_t gguf_get_version(const struct gguf_context* ctx);
size_t gguf_get_alignment(const struct gguf_context* ctx);
size_t gguf_get_data_offset(const struct gguf_context* ctx);
int64_t gguf_get_n_kv(const struct gguf_context* ctx);
const char* gguf_get_key(const struct gguf_context* ctx, int64_t key_id);
int gguf_get_kv_type(const struct gguf_context* ctx, int64_t key_id);
int gguf_get_arr_type(const struct gguf_context* ctx, int64_t key_id);
const void* gguf_get_val_data(const struct gguf_context* ctx, int64_t key_id);
const char* gguf_get_val_str(const struct gguf_context* ctx, int64_t key_id);
size_t gguf_get_arr_n(const struct gguf_context* ctx, int64_t key_id);
const void* gguf_get_arr_data(const struct gguf_context* ctx, int64_t key_id);
const char* gguf_get_arr_str(const struct gguf_context* ctx, int64_t key_id, size_t i);
int64_t gguf_get_n_tensors(const struct gguf_context* ctx);
size_t gguf_get_tensor_offset(const struct gguf_context* ctx, int64_t tensor_id);
const char* gguf_get_tensor_name(const struct gguf_context* ctx, int64_t tensor_id);
int gguf_get_tensor_type(const struct gguf_context* ctx, int64_t tensor_id);
size_t gguf_get_tensor_size(const struct gguf_context* ctx, int64_t tensor_id);
void gguf_set_val_u8(struct gguf_context* ctx, const char* key, uint8_t val);
void gguf_set_val_i8(struct gguf_context* ctx, const char* key, int8_t val);
void gguf_set_val_u16(struct gguf_context* ctx, const char* key, uint16_t val);
void gguf_set_val_i16(struct gguf_context* ctx, const char* key, int16_t val);
void gguf_set_val_u32(struct gguf_context* ctx, const char* key, uint32_t val);
void gguf_set_val_i32(struct gguf_context* ctx, const char* key, int32_t val);
void gguf_set_val_f32(struct gguf_context* ctx, const char* key, float val);
void gguf_set_val_u64(struct gguf_context* ctx, const char* key, uint64_t val);
void gguf_set_val_i64(struct gguf_context* ctx, const char* key, int64_t val);
void gguf_set_val_f64(struct gguf_context* ctx, const char* key, double val);
void gguf_set_val_bool(struct gguf_context* ctx, const char* key, bool val);
void gguf_set_val_str(struct gguf_context* ctx, const char* key, const char* val);
void gguf_set_arr_data(struct gguf_context* ctx, const char* key, int type, const void* data,
                       size_t n);
void gguf_set_arr_str(struct gguf_context* ctx, const char* key, const char** data, size_t n);
void gguf_add_tensor(struct gguf_context* ctx, const struct ggml_tensor* tensor);
bool gguf_write_to_file(const struct gguf_context* ctx, const char* fname, bool only_meta);

/* ---- helpers ---- */
static const char* g_dir;

static void die(const char* what) {
  fprintf(stderr, "ggml_reference: %s\n", what);
  exit(1);
}

static void write_file(const char* name, const void* data, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) die(path);
}

static uint64_t g_state = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) { /* splitmix64 */
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float uniform(void) {
  return (float)((next_u64() >> 40) * 0x1p-24) * 2.0f - 1.0f;
}
static float normal(void) { /* sum of 4 uniforms: bell-shaped, deterministic */
  return (uniform() + uniform() + uniform() + uniform()) * 0.5f;
}

/* to-float of n elements of `type` */
static void to_float(int type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case T_F32:
      memcpy(dst, src, (size_t)n * 4);
      break;
    case T_F16:
      ggml_fp16_to_fp32_row(src, dst, n);
      break;
    case T_BF16:
      ggml_bf16_to_fp32_row(src, dst, n);
      break;
    case T_Q8_0:
      dequantize_row_q8_0(src, dst, n);
      break;
    case T_Q4_0:
      dequantize_row_q4_0(src, dst, n);
      break;
    case T_Q4_K:
      dequantize_row_q4_K(src, dst, n);
      break;
    case T_Q6_K:
      dequantize_row_q6_K(src, dst, n);
      break;
    default:
      die("to_float: unsupported type");
  }
}

/* from-float (ggml's quantizer, as llama-quantize calls it without an imatrix) */
static size_t from_float(int type, const float* src, void* dst, int64_t nrows, int64_t per_row) {
  switch (type) {
    case T_F32:
      memcpy(dst, src, (size_t)(nrows * per_row) * 4);
      return (size_t)(nrows * per_row) * 4;
    case T_F16:
      ggml_fp32_to_fp16_row(src, dst, nrows * per_row);
      return (size_t)(nrows * per_row) * 2;
    case T_BF16:
      ggml_fp32_to_bf16_row_ref(src, dst, nrows * per_row);
      return (size_t)(nrows * per_row) * 2;
    default:
      return ggml_quantize_chunk(type, src, dst, 0, nrows, per_row, NULL);
  }
}

static size_t row_bytes(int type, int64_t n) {
  return (size_t)(n / ggml_blck_size(type)) * ggml_type_size(type);
}

/* ---- (a) the block formats ---- */
enum { kRows = 12, kPerRow = 256 };

static void make_input(float* x) {
  for (int r = 0; r < kRows; ++r) {
    float* row = x + r * kPerRow;
    for (int j = 0; j < kPerRow; ++j) {
      float v = 0.0f;
      switch (r) {
        case 0:
          v = 0.0f;
          break; /* all zeros */
        case 1:
          v = normal();
          break; /* typical weights */
        case 2:
          v = normal() * 0.02f;
          break; /* small weights */
        case 3:
          v = normal() * 3.0e4f;
          break; /* huge */
        case 4:
          v = normal() * 1.0e-20f;
          break; /* tiny (scale below f16) */
        case 5:
          v = (j == 77) ? 100.0f : normal() * 0.01f;
          break; /* one outlier */
        case 6:
          v = (j == 200) ? -100.0f : normal() * 0.01f;
          break;
        case 7: /* exact halves: amax 127 (Q8_0 scale 1), ties to round */
          v = (j % 32 == 0) ? 127.0f : (float)((j % 64) - 32) + 0.5f;
          break;
        case 8: /* Q4_0 scale 1: max -8 per block, ties at x + 8.5 */
          v = (j % 32 == 5) ? -8.0f : (float)((j % 16) - 8) * 0.5f;
          break;
        case 9:
          v = (float)(j - 128) / 16.0f;
          break; /* ramp */
        case 10:
          v = (j < 128) ? 0.0f : normal();
          break; /* half zeros: zero blocks */
        case 11:
          v = normal() * 1.0e6f;
          break; /* scales past f16: inf/nan */
      }
      row[j] = v;
    }
  }
}

static void block_format(int type, const char* name, const float* x) {
  const int64_t n = (int64_t)kRows * kPerRow;
  const size_t bytes = row_bytes(type, n);
  unsigned char *q = malloc(bytes), *q_ref = malloc(bytes);
  float* y = malloc((size_t)n * 4);
  if (from_float(type, x, q, kRows, kPerRow) != bytes) die("quantize size");
  /* the row reference quantizers must agree with ggml_quantize_chunk */
  void (*ref)(const float*, void*, int64_t) = NULL;
  if (type == T_Q8_0) ref = quantize_row_q8_0_ref;
  if (type == T_Q4_0) ref = quantize_row_q4_0_ref;
  if (type == T_Q4_K) ref = quantize_row_q4_K_ref;
  if (type == T_Q6_K) ref = quantize_row_q6_K_ref;
  if (ref) {
    ref(x, q_ref, n);
    if (memcmp(q, q_ref, bytes) != 0) die("quantize_row_*_ref differs from ggml_quantize_chunk");
  }
  to_float(type, q, y, n);
  char file[256];
  snprintf(file, sizeof file, "blocks/%s.quant.bin", name);
  write_file(file, q, bytes);
  snprintf(file, sizeof file, "blocks/%s.dequant.f32", name);
  write_file(file, y, (size_t)n * 4);

  /* random bytes, with every f16 scale set to a finite value */
  const int64_t rn = 4 * 256;
  const size_t rbytes = row_bytes(type, rn);
  unsigned char* rq = malloc(rbytes);
  float* ry = malloc((size_t)rn * 4);
  for (size_t i = 0; i < rbytes; ++i) rq[i] = (unsigned char)(next_u64() >> 56);
  const size_t bs = ggml_type_size(type);
  for (size_t b = 0; b < rbytes / bs; ++b) {
    unsigned char* blk = rq + b * bs;
    uint16_t h[2];
    float scales[2] = {uniform() * 2.0f, uniform() * 0.5f};
    ggml_fp32_to_fp16_row(scales, h, 2);
    if (type == T_Q8_0 || type == T_Q4_0) memcpy(blk, &h[0], 2); /* d first */
    if (type == T_Q4_K) memcpy(blk, h, 4);                       /* d, dmin first */
    if (type == T_Q6_K) memcpy(blk + bs - 2, &h[0], 2);          /* d last */
  }
  if (type == T_F16 || type == T_BF16) { /* avoid NaN payload questions: clear exponent all-ones */
    for (size_t i = 0; i + 1 < rbytes; i += 2)
      if (type == T_F16 && (rq[i + 1] & 0x7c) == 0x7c) rq[i + 1] &= 0xbf;
  }
  to_float(type, rq, ry, rn);
  snprintf(file, sizeof file, "blocks/%s.random.bin", name);
  write_file(file, rq, rbytes);
  snprintf(file, sizeof file, "blocks/%s.random_dequant.f32", name);
  write_file(file, ry, (size_t)rn * 4);
  free(q), free(q_ref), free(y), free(rq), free(ry);
}

/* ---- (b) GGUF files ---- */
struct tensor_spec {
  const char* name;
  int type;
  int n_dims;
  int64_t ne[4];
  float scale;
};

static void add_tensors(struct gguf_context* g, struct ggml_context* ctx,
                        const struct tensor_spec* specs, int n) {
  for (int i = 0; i < n; ++i) {
    const struct tensor_spec* s = &specs[i];
    struct ggml_tensor* t = ggml_new_tensor(ctx, s->type, s->n_dims, s->ne);
    ggml_set_name(t, s->name);
    int64_t numel = 1;
    for (int d = 0; d < s->n_dims; ++d) numel *= s->ne[d];
    float* x = malloc((size_t)numel * 4 + 4);
    for (int64_t j = 0; j < numel; ++j) x[j] = normal() * s->scale;
    if (numel > 3) x[numel / 3] = 0.0f;
    from_float(s->type, x, ggml_get_data(t), numel / s->ne[0], s->ne[0]);
    free(x);
    gguf_add_tensor(g, t);
  }
}

static void json_string(FILE* f, const char* s) {
  fputc('"', f);
  for (const unsigned char* p = (const unsigned char*)s; *p; ++p) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static const char* gtype_name(int t) {
  static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  return (t >= 0 && t <= 12) ? names[t] : "?";
}

static void json_scalar(FILE* f, int type, const void* p) {
  switch (type) {
    case G_U8:
      fprintf(f, "%u", *(const uint8_t*)p);
      break;
    case G_I8:
      fprintf(f, "%d", *(const int8_t*)p);
      break;
    case G_U16:
      fprintf(f, "%u", *(const uint16_t*)p);
      break;
    case G_I16:
      fprintf(f, "%d", *(const int16_t*)p);
      break;
    case G_U32:
      fprintf(f, "%u", *(const uint32_t*)p);
      break;
    case G_I32:
      fprintf(f, "%d", *(const int32_t*)p);
      break;
    case G_U64:
      fprintf(f, "%llu", (unsigned long long)*(const uint64_t*)p);
      break;
    case G_I64:
      fprintf(f, "%lld", (long long)*(const int64_t*)p);
      break;
    case G_F32:
      fprintf(f, "%.9g", (double)*(const float*)p);
      break;
    case G_F64:
      fprintf(f, "%.17g", *(const double*)p);
      break;
    case G_BOOL:
      fprintf(f, "%s", *(const int8_t*)p ? "true" : "false");
      break;
    default:
      die("json_scalar");
  }
}

static size_t gsize(int type) {
  static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return sizes[type];
}

/* Reads `path` back with ggml's reader and writes what it found. */
static void describe(const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.gguf", g_dir, name);
  struct ggml_context* meta = NULL;
  struct gguf_init_params params = {true, &meta};
  struct gguf_context* g = gguf_init_from_file(path, params);
  if (!g || !meta) die("ggml cannot read back its own file");
  snprintf(path, sizeof path, "%s/%s.expected.json", g_dir, name);
  FILE* f = fopen(path, "w");
  fprintf(f, "{\n  \"ggml_version\": \"%s\", \"ggml_commit\": \"%s\",\n", ggml_version(),
          ggml_commit());
  fprintf(f, "  \"version\": %u, \"alignment\": %zu, \"data_offset\": %zu,\n", gguf_get_version(g),
          gguf_get_alignment(g), gguf_get_data_offset(g));
  fprintf(f, "  \"metadata\": [\n");
  const int64_t n_kv = gguf_get_n_kv(g);
  for (int64_t i = 0; i < n_kv; ++i) {
    const int type = gguf_get_kv_type(g, i);
    fprintf(f, "    {\"key\": ");
    json_string(f, gguf_get_key(g, i));
    fprintf(f, ", \"type\": \"%s\"", gtype_name(type));
    if (type == G_ARR) {
      const int at = gguf_get_arr_type(g, i);
      const size_t n = gguf_get_arr_n(g, i);
      fprintf(f, ", \"element_type\": \"%s\", \"value\": [", gtype_name(at));
      for (size_t k = 0; k < n; ++k) {
        if (k) fputs(", ", f);
        if (at == G_STR)
          json_string(f, gguf_get_arr_str(g, i, k));
        else
          json_scalar(f, at, (const char*)gguf_get_arr_data(g, i) + k * gsize(at));
      }
      fputs("]", f);
    } else if (type == G_STR) {
      fputs(", \"value\": ", f);
      json_string(f, gguf_get_val_str(g, i));
    } else {
      fputs(", \"value\": ", f);
      json_scalar(f, type, gguf_get_val_data(g, i));
    }
    fprintf(f, "}%s\n", i + 1 < n_kv ? "," : "");
  }
  fprintf(f, "  ],\n  \"tensors\": [\n");
  const int64_t n_t = gguf_get_n_tensors(g);
  /* the dims come from the file itself: ggml's reader keeps them in a
     ggml_tensor that gguf.h does not expose without a ggml_context */
  snprintf(path, sizeof path, "%s/%s.gguf", g_dir, name);
  FILE* in = fopen(path, "rb");
  fseek(in, 0, SEEK_END);
  const long file_size = ftell(in);
  unsigned char* file = malloc((size_t)file_size);
  fseek(in, 0, SEEK_SET);
  if (fread(file, 1, (size_t)file_size, in) != (size_t)file_size) die("read back");
  fclose(in);
  snprintf(path, sizeof path, "%s/%s.dequant.f32", g_dir, name);
  FILE* deq = fopen(path, "wb");
  for (int64_t i = 0; i < n_t; ++i) {
    const int type = gguf_get_tensor_type(g, i);
    const size_t off = gguf_get_tensor_offset(g, i), size = gguf_get_tensor_size(g, i);
    const size_t begin = gguf_get_data_offset(g) + off;
    int64_t numel = (int64_t)(size / ggml_type_size(type)) * ggml_blck_size(type);
    float* y = malloc((size_t)numel * 4 + 4);
    to_float(type, file + begin, y, numel);
    fwrite(y, 4, (size_t)numel, deq);
    free(y);
    fprintf(f, "    {\"name\": ");
    json_string(f, gguf_get_tensor_name(g, i));
    const struct ggml_tensor* t = ggml_get_tensor(meta, gguf_get_tensor_name(g, i));
    if (!t || ggml_nelements(t) != numel) die("tensor read back");
    const int64_t* ne = tensor_ne(t);
    fprintf(
        f, ", \"type\": \"%s\", \"type_id\": %d, \"n_dims\": %d, \"ne\": [%lld, %lld, %lld, %lld],",
        ggml_type_name(type), type, ggml_n_dims(t), (long long)ne[0], (long long)ne[1],
        (long long)ne[2], (long long)ne[3]);
    fprintf(f, " \"offset\": %zu, \"bytes\": %zu, \"numel\": %lld}%s\n", off, size,
            (long long)numel, i + 1 < n_t ? "," : "");
  }
  fclose(deq);
  free(file);
  fprintf(f, "  ]\n}\n");
  fclose(f);
  gguf_free(g);
  ggml_free(meta);
}

/* ggml's writer places tensors by the context's alignment, which only its
   reader sets from general.alignment (gguf_set_val_u32 stores the key
   alone): a context with a non-default alignment is the metadata written
   and read back before any tensor is added. */
static struct gguf_context* reopen_with_alignment(struct gguf_context* g) {
  char path[4096];
  snprintf(path, sizeof path, "%s/meta.tmp", g_dir);
  if (!gguf_write_to_file(g, path, true)) die("gguf_write_to_file (meta)");
  gguf_free(g);
  struct gguf_init_params params = {true, NULL};
  struct gguf_context* r = gguf_init_from_file(path, params);
  if (!r) die("reading back the metadata");
  remove(path);
  return r;
}

static void write_gguf(const char* name, struct gguf_context* g) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.gguf", g_dir, name);
  if (!gguf_write_to_file(g, path, false)) die("gguf_write_to_file");
  describe(name);
}

int main(int argc, char** argv) {
  if (argc != 2) die("usage: ggml_reference OUT_DIR");
  g_dir = argv[1];

  { /* the type table */
    char path[4096];
    snprintf(path, sizeof path, "%s/ggml_types.txt", g_dir);
    FILE* f = fopen(path, "w");
    fprintf(f,
            "# ggml %s (%s): id name block_size type_size, from ggml_type_name,\n"
            "# ggml_blck_size and ggml_type_size (names with spaces: removed ids)\n",
            ggml_version(), ggml_commit());
    for (int i = 0; i <= 42; ++i)
      fprintf(f, "%d\t%s\t%lld\t%zu\n", i, ggml_type_name(i), (long long)ggml_blck_size(i),
              ggml_type_size(i));
    fclose(f);
  }

  float* x = malloc((size_t)kRows * kPerRow * 4);
  make_input(x);
  write_file("blocks/input.f32", x, (size_t)kRows * kPerRow * 4);
  block_format(T_Q8_0, "q8_0", x);
  block_format(T_Q4_0, "q4_0", x);
  block_format(T_Q4_K, "q4_k", x);
  block_format(T_Q6_K, "q6_k", x);
  block_format(T_F16, "f16", x);
  block_format(T_BF16, "bf16", x);
  free(x);

  struct ggml_init_params ip = {16u << 20, NULL, false};

  { /* every metadata type, every tensor type, 1-4 dims, default alignment */
    struct ggml_context* ctx = ggml_init(ip);
    struct gguf_context* g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "kappa-test");
    gguf_set_val_str(g, "general.name", "all types \"quoted\" \xc3\xa9\xe2\x82\xac");
    gguf_set_val_u8(g, "test.u8", 250);
    gguf_set_val_i8(g, "test.i8", -128);
    gguf_set_val_u16(g, "test.u16", 65535);
    gguf_set_val_i16(g, "test.i16", -32768);
    gguf_set_val_u32(g, "test.u32", 4000000000u);
    gguf_set_val_i32(g, "test.i32", -2147483647 - 1);
    gguf_set_val_f32(g, "test.f32", 3.14159274f);
    gguf_set_val_u64(g, "test.u64", 18446744073709551615ull);
    gguf_set_val_i64(g, "test.i64", -9223372036854775807ll - 1);
    gguf_set_val_f64(g, "test.f64", -2.718281828459045);
    gguf_set_val_bool(g, "test.bool_true", true);
    gguf_set_val_bool(g, "test.bool_false", false);
    gguf_set_val_str(g, "test.empty_string", "");
    const uint8_t a_u8[] = {0, 1, 255};
    const int8_t a_i8[] = {-1, 0, 127};
    const uint16_t a_u16[] = {1, 65535};
    const int16_t a_i16[] = {-300, 300};
    const uint32_t a_u32[] = {7, 4294967295u};
    const int32_t a_i32[] = {-5, 5, 100000};
    const float a_f32[] = {0.5f, -1.25f, 1e-30f, 3.4e38f};
    const uint64_t a_u64[] = {1, 18446744073709551615ull};
    const int64_t a_i64[] = {-9223372036854775807ll - 1, 42};
    const double a_f64[] = {1e-300, -0.1};
    const int8_t a_bool[] = {1, 0, 1};
    gguf_set_arr_data(g, "test.arr_u8", G_U8, a_u8, 3);
    gguf_set_arr_data(g, "test.arr_i8", G_I8, a_i8, 3);
    gguf_set_arr_data(g, "test.arr_u16", G_U16, a_u16, 2);
    gguf_set_arr_data(g, "test.arr_i16", G_I16, a_i16, 2);
    gguf_set_arr_data(g, "test.arr_u32", G_U32, a_u32, 2);
    gguf_set_arr_data(g, "test.arr_i32", G_I32, a_i32, 3);
    gguf_set_arr_data(g, "test.arr_f32", G_F32, a_f32, 4);
    gguf_set_arr_data(g, "test.arr_u64", G_U64, a_u64, 2);
    gguf_set_arr_data(g, "test.arr_i64", G_I64, a_i64, 2);
    gguf_set_arr_data(g, "test.arr_f64", G_F64, a_f64, 2);
    gguf_set_arr_data(g, "test.arr_bool", G_BOOL, a_bool, 3);
    gguf_set_arr_data(g, "test.arr_empty", G_I32, a_i32, 0);
    const char* strs[] = {"<s>", "", "\xe2\x96\x81hello", "tab\there"};
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", strs, 4);
    const struct tensor_spec specs[] = {
        {"f32.1d", T_F32, 1, {7, 1, 1, 1}, 1.0f},
        {"f16.2d", T_F16, 2, {5, 3, 1, 1}, 2.0f},
        {"bf16.3d", T_BF16, 3, {4, 3, 2, 1}, 100.0f},
        {"q8_0.2d", T_Q8_0, 2, {64, 3, 1, 1}, 1.0f},
        {"q4_0.4d", T_Q4_0, 4, {32, 2, 2, 2}, 0.5f},
        {"q4_k.2d", T_Q4_K, 2, {256, 2, 1, 1}, 0.1f},
        {"q6_k.1d", T_Q6_K, 1, {512, 1, 1, 1}, 3.0f},
        {"f32.4d", T_F32, 4, {3, 1, 2, 2}, 1.0f},
        {"blk.0.attn_q.weight", T_Q8_0, 2, {32, 1, 1, 1}, 1.0f},
    };
    add_tensors(g, ctx, specs, (int)(sizeof specs / sizeof specs[0]));
    write_gguf("all_types", g);
    gguf_free(g);
    ggml_free(ctx);
  }
  { /* general.alignment 64, before the tensors, and sizes that need padding */
    struct ggml_context* ctx = ggml_init(ip);
    struct gguf_context* g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "llama");
    gguf_set_val_u32(g, "general.alignment", 64);
    gguf_set_val_u32(g, "llama.context_length", 128);
    g = reopen_with_alignment(g);
    const struct tensor_spec specs[] = {
        {"token_embd.weight", T_Q4_0, 2, {64, 5, 1, 1}, 1.0f},
        {"output_norm.weight", T_F32, 1, {3, 1, 1, 1}, 1.0f},
        {"output.weight", T_Q6_K, 2, {256, 3, 1, 1}, 1.0f},
        {"blk.0.ffn_down.weight", T_Q4_K, 2, {256, 1, 1, 1}, 1.0f},
        {"blk.0.ffn_up.weight", T_F16, 2, {3, 3, 1, 1}, 1.0f},
    };
    add_tensors(g, ctx, specs, (int)(sizeof specs / sizeof specs[0]));
    write_gguf("aligned64", g);
    gguf_free(g);
    ggml_free(ctx);
  }
  { /* small: one tensor that ends exactly at the end of the file (for the
       truncation test), alignment 8 */
    struct ggml_context* ctx = ggml_init(ip);
    struct gguf_context* g = gguf_init_empty();
    gguf_set_val_u32(g, "general.alignment", 8);
    gguf_set_val_str(g, "general.architecture", "gpt2");
    const char* merges[] = {"a b", "ab c"};
    gguf_set_arr_str(g, "tokenizer.ggml.merges", merges, 2);
    g = reopen_with_alignment(g);
    const struct tensor_spec specs[] = {
        {"a", T_F16, 2, {2, 2, 1, 1}, 1.0f},
        {"b", T_Q8_0, 1, {32, 1, 1, 1}, 1.0f}, /* 34 bytes, padded to 40 by ggml */
        {"c", T_F32, 1, {2, 1, 1, 1}, 1.0f},   /* 8 bytes: the file ends here */
    };
    add_tensors(g, ctx, specs, (int)(sizeof specs / sizeof specs[0]));
    write_gguf("small", g);
    gguf_free(g);
    ggml_free(ctx);
  }
  return 0;
}
