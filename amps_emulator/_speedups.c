/* The compiled half of the publish hot path (issue 19). Optional: every function here has a
 * pure-Python twin in amps_emulator/_hotpath.py, which runs when this module is not built (a
 * machine with no C compiler) or when AMPS_EMULATOR_PURE=1; the unit tests check both give
 * the same result for the same input.
 *
 * append_record: one journal frame (journal/record.py has the format: a 52-byte prefix, the
 *   CRC-32 of everything after its first 4 bytes, then the MessagePack payload array) encoded
 *   straight into the turn's bytearray: one resize, no intermediate objects. The payload bytes
 *   are exactly what msgspec.msgpack writes for the same tuple. Any argument outside the plain
 *   shapes the journal passes (exact str / int / None, a dict of str to str, bytes) goes to the
 *   pure-Python encoder instead, so unusual input behaves exactly as it always did.
 *
 * publish_run: the records of a run of plain publishes (one client, one topic) made and their
 *   frames appended in one call, instead of a record and an append_record call per publish.
 *
 * frame_size: the size append_record would write, without writing it (the memory journal
 *   counts its segments' sizes so).
 *
 * parse_publish_header: the header of a plain publish ({"c":"p","t":...} with a, cid, s), read
 *   without building a dict or decoding the 60-field header struct; anything else is declined.
 *
 * plain_run: the run of plain publishes to one topic among a read's frames (server/
 *   publish_run.py's rule), their bodies cut out, in one call instead of a parse per frame.
 *
 * sow_key: a SowKey of a topic keyed on one field (sow/keys.py's KeyGenerator), for an int
 *   or str value: BLAKE2b (RFC 7693) in one call instead of hashlib's five.
 *
 * sow_keyed: sow_key of each document of a run, paired with it (KeyGenerator.keyed's loop).
 *
 * hash_int_rows: the rows a one-field hash index adds for a run of new records whose field
 *   is an int (HashIndex.add_run's loop); int_run: how many such records lead a run
 *   (KeyHashIndex, which stores no row for them).
 *
 * bookmark_strs: the bookmark strings of a run of journal records (a property call each in
 *   Python).
 *
 * record_keys: the LMDB keys (insert sequence + SowKey) of a keyed run's records, new ones
 *   given the next sequences (sow/storage/lmdb_backend.py's LmdbBackend.swap_plain loop).
 *
 * scan_frames: the AMPS framing loop (4-byte big-endian length, payload): the complete
 *   payloads of one read as bytes objects, one copy each.
 *
 * Syncer: the transaction log's group fdatasync on a thread that never takes the GIL (no
 *   pure-Python twin: without it the log syncs in a worker thread, server/txlog.py).
 *
 * frame_parts: a fan-out delivery's frame from its shared header parts, its sids and the body,
 *   in one allocation; twin: protocol.codec.frame_parts_py.
 *
 * fan_send: a fan-out's deliveries to the connections of a plan (frame_parts and a send each)
 *   in one call; twin: server.delivery.plan.fan_send_py.
 *
 * replay_frames: a bookmark replay's p frames straight from the journal's frames as stored (no
 *   record decoded); twin: server.delivery.replay_frames.replay_frames_py.
 *
 * sow_frames: the batched sow frames of a query's results straight from the stored SOW values
 *   (no Record built, no header dict encoded per record); twin: sow.record.sow_frames_py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- CRC-32 (IEEE 802.3, reflected, the zlib.crc32 of the format) -------------------------
 * Slice-by-8 tables, and on x86-64 with PCLMULQDQ a carry-less multiplication fold for 64
 * bytes and more (AMPS_EMULATOR_CRC_TABLE=1 at import: the tables alone, for the tests). */

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

/* The table loop over n bytes on the register ``crc`` (not inverted in or out). */
static uint32_t crc32_bytes(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                             | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16
                      | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF]
              ^ crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24]
              ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF]
              ^ crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

/* Whether crc32_update folds with PCLMULQDQ: set once at import where the build has the fold
 * and the CPU has the instruction (all x86-64 CPUs since about 2010); _speedups.crc_clmul. */
static int crc_clmul;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(_WIN32)
#include <immintrin.h>
#define CRC_CLMUL 1

/* CRC folding with carry-less multiplication (Gopal et al., "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ", Intel, 2009), in its bit-reflected form for the
 * IEEE polynomial. Each constant is x^k mod P(x), bit-reflected, shifted left once:
 * k = 4*128+32 and 4*128-32 fold a 128-bit lane 512 bits on; 128+32 and 128-32 fold it 128
 * bits on; 64 folds the last 64 bits into 32; then P(x) and floor(x^64 / P(x)) reduce the
 * 64-bit remainder to 32 bits (Barrett). ``n`` >= 64 and a multiple of 16; ``crc`` is the
 * register (not inverted). 4 to 8 times the table loop's speed on records of 200 bytes and
 * more (the loop serves what is shorter, and every tail). */
__attribute__((target("pclmul")))
static uint32_t crc32_clmul_fold(uint32_t crc, const unsigned char *p, size_t n)
{
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k128 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k64 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p),
                              _mm_cvtsi32_si128((int)crc));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64;
    n -= 64;
#define CRC_FOLD(x, k, next)                                                   \
    x = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),         \
                                    _mm_clmulepi64_si128(x, k, 0x11)), (next))
    while (n >= 64) {  /* four lanes, each folded 512 bits on onto the next 64 bytes */
        CRC_FOLD(a, k512, _mm_loadu_si128((const __m128i *)p));
        CRC_FOLD(b, k512, _mm_loadu_si128((const __m128i *)(p + 16)));
        CRC_FOLD(c, k512, _mm_loadu_si128((const __m128i *)(p + 32)));
        CRC_FOLD(d, k512, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    CRC_FOLD(a, k128, b);  /* the four lanes into one */
    CRC_FOLD(a, k128, c);
    CRC_FOLD(a, k128, d);
    while (n >= 16) {
        CRC_FOLD(a, k128, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
#undef CRC_FOLD
    /* 128 -> 96 bits: the low 64 times x^64 mod P, onto the high 64 */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(k128, a, 0x01));
    /* 96 -> 64 bits */
    a = _mm_xor_si128(_mm_srli_si128(a, 4),
                      _mm_clmulepi64_si128(_mm_and_si128(a, low32), k64, 0x00));
    /* Barrett: 64 -> 32 bits */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(_mm_xor_si128(a, t), 4));
}
#endif

/* zlib.crc32(p[:n], crc) */
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
#ifdef CRC_CLMUL
    if (crc_clmul && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        crc = crc32_clmul_fold(crc, p, bulk);
        p += bulk;
        n -= bulk;
    }
#endif
    return ~crc32_bytes(crc, p, n);
}

/* ---- little-endian and big-endian stores ---------------------------------------------- */

static inline void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
    put_le32(p, (uint32_t)v);
    put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline unsigned char *put_be16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v;
    return p + 2;
}

static inline unsigned char *put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
    return p + 4;
}

static inline unsigned char *put_be64(unsigned char *p, uint64_t v)
{
    p = put_be32(p, (uint32_t)(v >> 32));
    return put_be32(p, (uint32_t)v);
}

/* ---- MessagePack pieces, sized first, then written (the encodings msgspec picks) ------- */

/* A str or bytes value: its UTF-8 (or raw) bytes and length. */
typedef struct {
    const char *data;
    Py_ssize_t len;
} span;

static Py_ssize_t str_head_size(Py_ssize_t n)
{
    return n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5;
}

static unsigned char *put_str(unsigned char *p, span s)
{
    Py_ssize_t n = s.len;
    if (n < 32) {
        *p++ = (unsigned char)(0xA0 | n);
    } else if (n < 256) {
        *p++ = 0xD9; *p++ = (unsigned char)n;
    } else if (n < 65536) {
        *p++ = 0xDA; p = put_be16(p, (uint16_t)n);
    } else {
        *p++ = 0xDB; p = put_be32(p, (uint32_t)n);
    }
    memcpy(p, s.data, (size_t)n);
    return p + n;
}

static Py_ssize_t bin_head_size(Py_ssize_t n)
{
    return n < 256 ? 2 : n < 65536 ? 3 : 5;
}

static unsigned char *put_bin(unsigned char *p, span s)
{
    Py_ssize_t n = s.len;
    if (n < 256) {
        *p++ = 0xC4; *p++ = (unsigned char)n;
    } else if (n < 65536) {
        *p++ = 0xC5; p = put_be16(p, (uint16_t)n);
    } else {
        *p++ = 0xC6; p = put_be32(p, (uint32_t)n);
    }
    memcpy(p, s.data, (size_t)n);
    return p + n;
}

/* Non-negative integers only (what the journal writes); msgspec's unsigned forms. */
static Py_ssize_t uint_size(uint64_t v)
{
    return v < 128 ? 1 : v <= 0xFF ? 2 : v <= 0xFFFF ? 3 : v <= 0xFFFFFFFFu ? 5 : 9;
}

static unsigned char *put_uint(unsigned char *p, uint64_t v)
{
    if (v < 128) {
        *p++ = (unsigned char)v;
    } else if (v <= 0xFF) {
        *p++ = 0xCC; *p++ = (unsigned char)v;
    } else if (v <= 0xFFFF) {
        *p++ = 0xCD; p = put_be16(p, (uint16_t)v);
    } else if (v <= 0xFFFFFFFFu) {
        *p++ = 0xCE; p = put_be32(p, (uint32_t)v);
    } else {
        *p++ = 0xCF; p = put_be64(p, v);
    }
    return p;
}

/* An exact str as UTF-8; 0 on success, -1 when it is not one (no exception left set). */
static int as_str(PyObject *o, span *out)
{
    if (!PyUnicode_CheckExact(o))
        return -1;
    out->data = PyUnicode_AsUTF8AndSize(o, &out->len);
    if (out->data == NULL) {
        PyErr_Clear();  /* e.g. a lone surrogate: the pure encoder raises what msgspec raises */
        return -1;
    }
    return out->len <= 0xFFFFFFFFu ? 0 : -1;
}

/* None, or an exact str. has = 0 for None. */
static int as_opt_str(PyObject *o, span *out, int *has)
{
    if (o == Py_None) {
        *has = 0;
        return 0;
    }
    *has = 1;
    return as_str(o, out);
}

/* An exact int in 0..2^64-1 (bool is not one). */
static int as_u64(PyObject *o, uint64_t *out)
{
    if (!PyLong_CheckExact(o))
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();  /* negative or too large: the pure encoder decides */
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static int as_i64(PyObject *o, int64_t *out)
{
    if (!PyLong_CheckExact(o))
        return -1;
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

#define MAX_HEADERS 16
#define PREFIX_SIZE 52

static PyObject *fallback_append = NULL;  /* the pure-Python append_record */
static PyObject *fallback_size = NULL;  /* the pure-Python frame_size */

/* The payload fields of a record: (topic, message_type, client_name, correlation_id, sow_key,
 * expiration, headers, body), in the plain shapes only. */
typedef struct {
    span topic, message_type, client_name, correlation_id, sow_key, body;
    int has_corr, has_key, has_exp;
    uint64_t expiration;
    span hk[MAX_HEADERS], hv[MAX_HEADERS];
    Py_ssize_t nh;
} payload_fields;

/* Read the 8 payload arguments; 0 when they are all plain, -1 (no exception) otherwise. */
static int read_payload(PyObject *const *a, payload_fields *f)
{
    if (as_str(a[0], &f->topic) || as_str(a[1], &f->message_type)
            || as_str(a[2], &f->client_name)
            || as_opt_str(a[3], &f->correlation_id, &f->has_corr)
            || as_opt_str(a[4], &f->sow_key, &f->has_key))
        return -1;
    f->has_exp = a[5] != Py_None;
    if (f->has_exp && as_u64(a[5], &f->expiration))
        return -1;
    PyObject *headers = a[6];
    if (!PyDict_CheckExact(headers) || PyDict_GET_SIZE(headers) > MAX_HEADERS)
        return -1;
    Py_ssize_t it = 0;
    PyObject *k, *v;
    f->nh = 0;
    while (PyDict_Next(headers, &it, &k, &v)) {
        if (as_str(k, &f->hk[f->nh]) || as_str(v, &f->hv[f->nh]))
            return -1;
        f->nh++;
    }
    if (!PyBytes_CheckExact(a[7]))
        return -1;
    f->body.data = PyBytes_AS_STRING(a[7]);
    f->body.len = PyBytes_GET_SIZE(a[7]);
    return f->body.len <= 0xFFFFFFFFu ? 0 : -1;
}

/* The MessagePack payload's size. */
static Py_ssize_t payload_size(const payload_fields *f)
{
    Py_ssize_t n = 1;  /* fixarray of 8 */
    n += str_head_size(f->topic.len) + f->topic.len;
    n += str_head_size(f->message_type.len) + f->message_type.len;
    n += str_head_size(f->client_name.len) + f->client_name.len;
    n += f->has_corr ? str_head_size(f->correlation_id.len) + f->correlation_id.len : 1;
    n += f->has_key ? str_head_size(f->sow_key.len) + f->sow_key.len : 1;
    n += f->has_exp ? uint_size(f->expiration) : 1;
    n += f->nh < 16 ? 1 : 3;
    for (Py_ssize_t i = 0; i < f->nh; i++)
        n += str_head_size(f->hk[i].len) + f->hk[i].len + str_head_size(f->hv[i].len)
             + f->hv[i].len;
    n += bin_head_size(f->body.len) + f->body.len;
    return n;
}

static unsigned char *put_payload(unsigned char *p, const payload_fields *f)
{
    *p++ = 0x98;
    p = put_str(p, f->topic);
    p = put_str(p, f->message_type);
    p = put_str(p, f->client_name);
    if (f->has_corr) p = put_str(p, f->correlation_id); else *p++ = 0xC0;
    if (f->has_key) p = put_str(p, f->sow_key); else *p++ = 0xC0;
    if (f->has_exp) p = put_uint(p, f->expiration); else *p++ = 0xC0;
    if (f->nh < 16) {
        *p++ = (unsigned char)(0x80 | f->nh);
    } else {
        *p++ = 0xDE; p = put_be16(p, (uint16_t)f->nh);
    }
    for (Py_ssize_t i = 0; i < f->nh; i++) {
        p = put_str(p, f->hk[i]);
        p = put_str(p, f->hv[i]);
    }
    return put_bin(p, f->body);
}

static PyObject *call_fallback(PyObject *fn, PyObject *const *args, Py_ssize_t nargs)
{
    if (fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups: no pure-Python twin registered");
        return NULL;
    }
    return PyObject_Vectorcall(fn, args, (size_t)nargs, NULL);
}

/* Write one frame at ``frame``: the prefix, the payload ``f`` (``n`` bytes: payload_size),
 * and the CRC of everything after it. */
static void put_frame(unsigned char *frame, unsigned char kind, uint64_t position,
                      uint64_t publisher_id, uint64_t sequence, int64_t timestamp, int has_cs,
                      uint64_t client_seq, const payload_fields *f, Py_ssize_t n)
{
    frame[4] = 0xA7;  /* FRAME_MAGIC */
    frame[5] = 1;  /* FRAME_VERSION */
    frame[6] = kind;
    frame[7] = has_cs ? 1 : 0;  /* FLAG_CLIENT_SEQ */
    put_le32(frame + 8, (uint32_t)n);
    put_le64(frame + 12, position);
    put_le64(frame + 20, publisher_id);
    put_le64(frame + 28, sequence);
    put_le64(frame + 36, (uint64_t)timestamp);
    put_le64(frame + 44, client_seq);
    put_payload(frame + PREFIX_SIZE, f);
    put_le32(frame, crc32_update(0, frame + 4, (size_t)(PREFIX_SIZE - 4 + n)));
}

static PyObject *
append_record(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_Format(PyExc_TypeError, "append_record() takes 15 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0];
    uint64_t kind, position, publisher_id, sequence, client_seq = 0;
    int64_t timestamp;
    int has_cs = args[6] != Py_None;
    payload_fields f;

    if (!PyByteArray_CheckExact(buf) || as_u64(args[1], &kind) || kind > 0xFF
            || as_u64(args[2], &position) || as_u64(args[3], &publisher_id)
            || as_u64(args[4], &sequence) || as_i64(args[5], &timestamp)
            || (has_cs && as_u64(args[6], &client_seq)) || read_payload(args + 7, &f))
        return call_fallback(fallback_append, args, nargs);
    Py_ssize_t n = payload_size(&f);
    if (n > 0xFFFFFFFFu)
        return call_fallback(fallback_append, args, nargs);

    Py_ssize_t start = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, start + PREFIX_SIZE + n) < 0)
        return NULL;  /* (a buffer export: what `buf += ...` raises too) */
    put_frame((unsigned char *)PyByteArray_AS_STRING(buf) + start, (unsigned char)kind, position,
              publisher_id, sequence, timestamp, has_cs, client_seq, &f, n);
    return PyLong_FromSsize_t(PREFIX_SIZE + n);
}

/* frame_size(topic, message_type, client_name, correlation_id, sow_key, expiration, headers,
 * body): the size of the frame of a record with these payload fields, without encoding it. */
static PyObject *
frame_size(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    payload_fields f;
    if (nargs != 8 || read_payload(args, &f))
        return call_fallback(fallback_size, args, nargs);
    return PyLong_FromSsize_t(PREFIX_SIZE + payload_size(&f));
}

static PyObject *
set_fallbacks(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_fallbacks(append_record, frame_size)");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(fallback_append, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(fallback_size, args[1]);
    Py_RETURN_NONE;
}

/* The bytes the frames of a run of publishes take (publish_run, replicated_run): -1 (no
 * exception) when a body is not bytes, an item of ``a`` or ``b`` (lists as long as ``bodies``,
 * or None) is not a uint64, a frame is too long, or the run's positions would wrap. */
static Py_ssize_t
run_size(payload_fields *f, uint64_t position, PyObject *bodies, PyObject *a, PyObject *b)
{
    Py_ssize_t n = PyList_GET_SIZE(bodies), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = PyList_GET_ITEM(bodies, i);
        uint64_t v;
        if (!PyBytes_CheckExact(body) || (a != Py_None && as_u64(PyList_GET_ITEM(a, i), &v))
                || (b != Py_None && as_u64(PyList_GET_ITEM(b, i), &v)))
            return -1;
        f->body.len = PyBytes_GET_SIZE(body);
        Py_ssize_t size = payload_size(f);
        if (size > 0xFFFFFFFF)
            return -1;  /* (the twin raises what append_record_py raises) */
        total += PREFIX_SIZE + size;
    }
    if (position + (uint64_t)n < position)
        return -1;
    return total;
}

/* The frames of a run of publishes (publish_run, replicated_run; both checked every argument
 * already): the index entries (position, base + the frame's offset in buf) of each record at or
 * past ``mark`` (moving ``interval`` past each) added to ``index``, then every frame appended to
 * ``buf`` (``total`` bytes, one resize). ``seqs``: each record's bookmark sequence; ``css``: each
 * one's ``s``, or None. -1 with an exception set, buf unchanged, when the index entries or the
 * resize fail: nothing can fail once buf has grown. */
static int
append_run_frames(PyObject *buf, payload_fields *f, uint64_t position, uint64_t pid, int64_t ts,
                  PyObject *seqs, PyObject *css, PyObject *bodies, Py_ssize_t total,
                  int64_t base, uint64_t mark, uint64_t interval, PyObject *index)
{
    Py_ssize_t n = PyList_GET_SIZE(bodies);
    Py_ssize_t start = PyByteArray_GET_SIZE(buf), off = start;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t pos = position + (uint64_t)i;
        if (pos >= mark) {
            PyObject *entry = Py_BuildValue("(Kn)", (unsigned long long)pos,
                                            (Py_ssize_t)(base + off));
            if (entry == NULL || PyList_Append(index, entry) < 0) {
                Py_XDECREF(entry);
                return -1;
            }
            Py_DECREF(entry);
            mark = pos + interval;
        }
        f->body.len = PyBytes_GET_SIZE(PyList_GET_ITEM(bodies, i));
        off += PREFIX_SIZE + payload_size(f);
    }
    if (PyByteArray_Resize(buf, start + total) < 0)
        return -1;
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(buf) + start;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t cs = 0, seq = 0;
        PyObject *cs_o = css == Py_None ? Py_None : PyList_GET_ITEM(css, i);
        if (cs_o != Py_None)
            as_u64(cs_o, &cs);  /* (checked by the caller) */
        as_u64(PyList_GET_ITEM(seqs, i), &seq);
        PyObject *b = PyList_GET_ITEM(bodies, i);
        f->body.data = PyBytes_AS_STRING(b);
        f->body.len = PyBytes_GET_SIZE(b);
        Py_ssize_t size = payload_size(f);
        put_frame(p, 1 /* RecordKind.PUBLISH */, position + (uint64_t)i, pid, seq, ts,
                  cs_o != Py_None, cs, f, size);
        p += PREFIX_SIZE + size;
    }
    return 0;
}

/* publish_run(buf, record_type, topic, message_type, client_name, publisher_id, timestamp,
 *             position, last, bodies, client_seqs, base, mark, interval)
 *   -> (records, sequences, index) | None
 *
 * A run of plain publishes of one client to one topic (journal.base.publish_run_py is the
 * twin, and says what each argument is): each body's JournalRecord (``record_type`` called
 * with the 14 fields positionally) and its bookmark sequence, and, when ``buf`` is a
 * bytearray, every record's frame appended to it (one resize; the bytes append_record writes
 * for each). ``index``: (position, base + its frame's offset in buf) of each record at or past
 * ``mark``, the mark moving ``interval`` past each. The records share one empty headers dict
 * (so a reader can tell a run's records apart: ``rec.headers is first.headers``). None, with
 * nothing done, for any argument outside these plain shapes (then the twin runs). */
#define S_LIMIT ((uint64_t)1 << 63)  /* journal.identity.SEQUENCE_FROM_S_LIMIT */

static PyObject *
publish_run(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 14) {
        PyErr_Format(PyExc_TypeError, "publish_run() takes 14 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0], *record_type = args[1], *bodies = args[9], *seqs = args[10];
    payload_fields f;  /* what every frame of the run shares; the body is set per frame */
    f.has_corr = f.has_key = f.has_exp = 0;
    f.nh = 0;
    uint64_t pid, position, last, mark, interval;
    int64_t ts, base;
    if ((buf != Py_None && !PyByteArray_CheckExact(buf)) || as_str(args[2], &f.topic)
            || as_str(args[3], &f.message_type) || as_str(args[4], &f.client_name)
            || as_u64(args[5], &pid)
            || as_i64(args[6], &ts) || as_u64(args[7], &position) || as_u64(args[8], &last)
            || !PyList_CheckExact(bodies) || as_i64(args[11], &base) || as_u64(args[12], &mark)
            || as_u64(args[13], &interval))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(bodies);
    if (seqs != Py_None && (!PyList_CheckExact(seqs) || PyList_GET_SIZE(seqs) != n))
        Py_RETURN_NONE;
    Py_ssize_t total = run_size(&f, position, bodies, seqs, Py_None);
    if (total < 0)
        Py_RETURN_NONE;

    PyObject *recs = PyList_New(n), *out_seqs = PyList_New(n), *index = PyList_New(0);
    PyObject *kind = PyLong_FromLong(1);  /* RecordKind.PUBLISH */
    PyObject *pid_o = PyLong_FromUnsignedLongLong(pid), *ts_o = PyLong_FromLongLong(ts);
    PyObject *headers = PyDict_New();  /* (empty, and one for the run: its records share it) */
    if (recs == NULL || out_seqs == NULL || index == NULL || kind == NULL || pid_o == NULL
            || ts_o == NULL || headers == NULL)
        goto fail;
    /* the records first: nothing is appended to buf unless they all could be made */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t pos = position + (uint64_t)i, cs = 0;
        PyObject *cs_o = seqs == Py_None ? Py_None : PyList_GET_ITEM(seqs, i);
        if (cs_o != Py_None)
            as_u64(cs_o, &cs);  /* (checked above) */
        if (cs && cs < S_LIMIT)
            last = cs > last ? cs : last + 1;
        else
            last = pos > last ? pos : last + 1;
        PyObject *pos_o = PyLong_FromUnsignedLongLong(pos);
        PyObject *seq_o = PyLong_FromUnsignedLongLong(last);
        if (pos_o == NULL || seq_o == NULL) {
            Py_XDECREF(pos_o); Py_XDECREF(seq_o);
            goto fail;
        }
        PyObject *fields[14] = {pos_o, kind, args[2], pid_o, seq_o, ts_o, args[4], cs_o,
                                Py_None, Py_None, Py_None, args[3], headers,
                                PyList_GET_ITEM(bodies, i)};
        PyObject *rec = PyObject_Vectorcall(record_type, fields, 14, NULL);
        Py_DECREF(pos_o);
        if (rec == NULL) {
            Py_DECREF(seq_o);
            goto fail;
        }
        PyList_SET_ITEM(recs, i, rec);
        PyList_SET_ITEM(out_seqs, i, seq_o);
    }
    if (buf != Py_None && n && append_run_frames(buf, &f, position, pid, ts, out_seqs, seqs, bodies,
                                                 total, base, mark, interval, index) < 0)
        goto fail;
    Py_DECREF(kind);
    Py_DECREF(pid_o);
    Py_DECREF(ts_o);
    Py_DECREF(headers);
    return Py_BuildValue("(NNN)", recs, out_seqs, index);
fail:
    Py_XDECREF(recs);  /* (unset items are NULL: list_dealloc skips them) */
    Py_XDECREF(out_seqs);
    Py_XDECREF(index);
    Py_XDECREF(kind);
    Py_XDECREF(pid_o);
    Py_XDECREF(ts_o);
    Py_XDECREF(headers);
    return NULL;
}

/* replicated_run(buf, record_type, topic, message_type, client_name, publisher_id, timestamp,
 *                position, sequences, client_seqs, headers, bodies, base, mark, interval)
 *   -> (records, index) | None
 *
 * A run of replicated publishes of one publisher to one topic (journal.replicated.
 * replicated_run_py is the twin, and says what each argument is): each body's JournalRecord
 * (``record_type`` called with the 14 fields positionally, its sequence from ``sequences``,
 * every record sharing the one ``headers`` dict) and, when ``buf`` is a bytearray, their frames
 * appended to it (one resize; the bytes append_record writes for each), with the index entries
 * as publish_run gives them. None, with nothing done, for any argument outside the plain
 * shapes (then the twin runs). */
static PyObject *
replicated_run(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_Format(PyExc_TypeError, "replicated_run() takes 15 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0], *record_type = args[1], *seqs = args[8], *css = args[9];
    PyObject *headers = args[10], *bodies = args[11];
    payload_fields f;  /* what every frame of the run shares; the body is set per frame */
    f.has_corr = f.has_key = f.has_exp = 0;
    f.nh = 0;
    uint64_t pid, position, mark, interval;
    int64_t ts, base;
    if ((buf != Py_None && !PyByteArray_CheckExact(buf)) || as_str(args[2], &f.topic)
            || as_str(args[3], &f.message_type) || as_str(args[4], &f.client_name)
            || as_u64(args[5], &pid) || as_i64(args[6], &ts) || as_u64(args[7], &position)
            || !PyList_CheckExact(seqs) || !PyDict_CheckExact(headers)
            || PyDict_GET_SIZE(headers) > MAX_HEADERS || !PyList_CheckExact(bodies)
            || as_i64(args[12], &base) || as_u64(args[13], &mark) || as_u64(args[14], &interval))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(bodies);
    if (PyList_GET_SIZE(seqs) != n
            || (css != Py_None && (!PyList_CheckExact(css) || PyList_GET_SIZE(css) != n)))
        Py_RETURN_NONE;
    Py_ssize_t it = 0;
    PyObject *hk, *hv;
    while (PyDict_Next(headers, &it, &hk, &hv)) {
        if (as_str(hk, &f.hk[f.nh]) || as_str(hv, &f.hv[f.nh]))
            Py_RETURN_NONE;
        f.nh++;
    }
    Py_ssize_t total = run_size(&f, position, bodies, seqs, css);
    if (total < 0)
        Py_RETURN_NONE;

    PyObject *recs = PyList_New(n), *index = PyList_New(0);
    PyObject *kind = PyLong_FromLong(1);  /* RecordKind.PUBLISH */
    PyObject *ts_o = PyLong_FromLongLong(ts);
    if (recs == NULL || index == NULL || kind == NULL || ts_o == NULL)
        goto fail;
    /* the records first: nothing is appended to buf unless they all could be made */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pos_o = PyLong_FromUnsignedLongLong(position + (uint64_t)i);
        if (pos_o == NULL)
            goto fail;
        PyObject *fields[14] = {pos_o, kind, args[2], args[5], PyList_GET_ITEM(seqs, i), ts_o,
                                args[4], css == Py_None ? Py_None : PyList_GET_ITEM(css, i),
                                Py_None, Py_None, Py_None, args[3], headers,
                                PyList_GET_ITEM(bodies, i)};
        PyObject *rec = PyObject_Vectorcall(record_type, fields, 14, NULL);
        Py_DECREF(pos_o);
        if (rec == NULL)
            goto fail;
        PyList_SET_ITEM(recs, i, rec);
    }
    if (buf != Py_None && n && append_run_frames(buf, &f, position, pid, ts, seqs, css, bodies,
                                                 total, base, mark, interval, index) < 0)
        goto fail;
    Py_DECREF(kind);
    Py_DECREF(ts_o);
    return Py_BuildValue("(NN)", recs, index);
fail:
    Py_XDECREF(recs);  /* (unset items are NULL: list_dealloc skips them) */
    Py_XDECREF(index);
    Py_XDECREF(kind);
    Py_XDECREF(ts_o);
    return NULL;
}

/* scan_frames(data: bytes, need: int, limit: int) -> (payloads, pos, need)
 *
 * From the start of ``data`` (``need``: the payload length of a frame whose prefix was already
 * read, -1 for none), cut every complete payload. Returns them, the offset of the first byte
 * not consumed, and the pending payload length (-1: reading a prefix). A length prefix above
 * ``limit`` stops the scan there with that length as ``need`` (the caller refuses the stream).
 */
static PyObject *
scan_frames(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "scan_frames() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *data = args[0];
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "scan_frames() needs bytes");
        return NULL;
    }
    long long need = PyLong_AsLongLong(args[1]);
    if (need == -1 && PyErr_Occurred())
        return NULL;
    long long limit = PyLong_AsLongLong(args[2]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (;;) {
        if (need < 0) {
            if (n - pos < 4)
                break;
            need = (long long)((uint32_t)d[pos] << 24 | (uint32_t)d[pos + 1] << 16
                               | (uint32_t)d[pos + 2] << 8 | (uint32_t)d[pos + 3]);
            if (need > limit)
                break;
            pos += 4;
        }
        if (n - pos < need)
            break;
        PyObject *payload = PyBytes_FromStringAndSize((const char *)d + pos, (Py_ssize_t)need);
        if (payload == NULL || PyList_Append(out, payload) < 0) {
            Py_XDECREF(payload);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(payload);
        pos += (Py_ssize_t)need;
        need = -1;
    }
    return Py_BuildValue("(NnL)", out, pos, need);
}

/* parse_publish_header(payload: bytes) -> (end, topic, ack_type, cid, seq) | None
 *
 * The header of a plain publish as the official clients write it, {"c":"p","t":"orders"} and
 * with "a", "cid" and "s": a flat JSON object with no whitespace whose keys are among c, t, a,
 * cid and s (each at most once), "c" being "p" or "publish", the strings without escapes or
 * control characters, "s" a plain integer in 0..2^64-1 or a string of digits of one (as the
 * JavaScript client sends it). Returns where the header ends (the
 * body starts) and the values (None when absent); None for anything else, which the caller
 * parses the general way. So for every header it accepts, the result is what msgspec's
 * decoding of the header gives.
 */
/* The parts of a plain publish header (see parse_publish_header): where the body starts, the
 * t, a and cid spans (len -1: absent; not yet checked for UTF-8) and s. */
typedef struct {
    Py_ssize_t end;
    span t, a, cid;
    int has_s;
    uint64_t seq;
} plain_parts;

/* 1 and the parts when ``d`` (``n`` bytes) starts with a plain publish header, else 0. */
static int parse_plain(const unsigned char *d, Py_ssize_t n, plain_parts *out)
{
    Py_ssize_t i = 1;
    /* value spans: c, t, a, cid as strings; s as an integer */
    span vc = {NULL, -1}, vt = {NULL, -1}, va = {NULL, -1}, vcid = {NULL, -1};
    int has_s = 0;
    uint64_t seq = 0;
    if (n < 2 || d[0] != '{')
        return 0;
    for (;;) {
        /* a key */
        if (i >= n || d[i] != '"')
            return 0;
        Py_ssize_t k0 = ++i;
        while (i < n && d[i] != '"') {
            if (d[i] == '\\' || d[i] < 0x20)
                return 0;
            i++;
        }
        if (i >= n)
            return 0;
        Py_ssize_t klen = i - k0;
        const unsigned char *key = d + k0;
        i++;
        if (i >= n || d[i] != ':')
            return 0;
        i++;
        if (i >= n)
            return 0;
        if (klen == 1 && key[0] == 's' && !has_s && d[i] == '"') {
            /* the JavaScript client's form, "s":"123": digits only, read as the general
               path reads a number sent as text (leading zeros and all) */
            has_s = 1;
            Py_ssize_t d0 = ++i;
            while (i < n && d[i] >= '0' && d[i] <= '9') {
                uint64_t digit = (uint64_t)(d[i] - '0');
                if (seq > (UINT64_MAX - digit) / 10)
                    return 0;  /* above 2^64-1 */
                seq = seq * 10 + digit;
                i++;
            }
            if (i == d0 || i >= n || d[i] != '"')
                return 0;  /* empty, or not only digits */
            i++;
        } else if (klen == 1 && key[0] == 's') {
            if (has_s || d[i] < '0' || d[i] > '9')
                return 0;
            has_s = 1;
            if (d[i] == '0') {
                i++;
                if (i < n && d[i] >= '0' && d[i] <= '9')
                    return 0;  /* a leading zero: not JSON */
            } else {
                int digits = 0;
                while (i < n && d[i] >= '0' && d[i] <= '9') {
                    uint64_t digit = (uint64_t)(d[i] - '0');
                    if (++digits > 20 || seq > (UINT64_MAX - digit) / 10)
                        return 0;  /* above 2^64-1 */
                    seq = seq * 10 + digit;
                    i++;
                }
            }
            if (i < n && (d[i] == '.' || d[i] == 'e' || d[i] == 'E'))
                return 0;  /* a float */
        } else {
            span *slot;
            if (klen == 1 && key[0] == 'c')
                slot = &vc;
            else if (klen == 1 && key[0] == 't')
                slot = &vt;
            else if (klen == 1 && key[0] == 'a')
                slot = &va;
            else if (klen == 3 && memcmp(key, "cid", 3) == 0)
                slot = &vcid;
            else
                return 0;
            if (slot->len >= 0 || d[i] != '"')
                return 0;  /* twice, or not a string */
            Py_ssize_t v0 = ++i;
            while (i < n && d[i] != '"') {
                if (d[i] == '\\' || d[i] < 0x20)
                    return 0;
                i++;
            }
            if (i >= n)
                return 0;
            slot->data = (const char *)d + v0;
            slot->len = i - v0;
            i++;
        }
        if (i >= n)
            return 0;
        if (d[i] == '}') {
            i++;
            break;
        }
        if (d[i] != ',')
            return 0;
        i++;
    }
    if (!(vc.len == 1 && vc.data[0] == 'p') && !(vc.len == 7 && memcmp(vc.data, "publish", 7) == 0))
        return 0;
    out->end = i;
    out->t = vt;
    out->a = va;
    out->cid = vcid;
    out->has_s = has_s;
    out->seq = seq;
    return 1;
}

static PyObject *
parse_publish_header(PyObject *Py_UNUSED(module), PyObject *payload)
{
    if (!PyBytes_Check(payload)) {
        PyErr_SetString(PyExc_TypeError, "parse_publish_header() needs bytes");
        return NULL;
    }
    plain_parts pp;
    if (!parse_plain((const unsigned char *)PyBytes_AS_STRING(payload),
                     PyBytes_GET_SIZE(payload), &pp))
        Py_RETURN_NONE;
    span vt = pp.t, va = pp.a, vcid = pp.cid;
    Py_ssize_t i = pp.end;
    int has_s = pp.has_s;
    uint64_t seq = pp.seq;
    PyObject *topic = NULL, *ack = NULL, *cid = NULL, *s = NULL;
    if (vt.len >= 0 && (topic = PyUnicode_DecodeUTF8(vt.data, vt.len, NULL)) == NULL)
        goto bad_text;
    if (va.len >= 0 && (ack = PyUnicode_DecodeUTF8(va.data, va.len, NULL)) == NULL)
        goto bad_text;
    if (vcid.len >= 0 && (cid = PyUnicode_DecodeUTF8(vcid.data, vcid.len, NULL)) == NULL)
        goto bad_text;
    if (has_s && (s = PyLong_FromUnsignedLongLong(seq)) == NULL)
        goto fail;
#define OR_NONE(o) ((o) != NULL ? (o) : (Py_INCREF(Py_None), Py_None))
    return Py_BuildValue("(nNNNN)", i, OR_NONE(topic), OR_NONE(ack), OR_NONE(cid), OR_NONE(s));
#undef OR_NONE
bad_text:
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        goto fail;
    PyErr_Clear();  /* not UTF-8: the general parser says what is wrong */
    Py_XDECREF(topic);
    Py_XDECREF(ack);
    Py_XDECREF(cid);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(ack);
    Py_XDECREF(cid);
    return NULL;
}

/* plain_run(payloads, start, named, last) -> (stop, topic, bodies, seqs, acked) | None
 *
 * The run of plain publishes to one topic at payloads[start:] (server.publish_run's rule; the
 * twin is server.publish_run.plain_run_py): frames whose header parse_publish_header reads,
 * with a topic (not empty, valid UTF-8, the first frame's), a cid that is valid UTF-8, no "a"
 * or "a":"persisted" with an "s", and either no "s" at all or an "s" on every one, each above
 * the one before (and above ``last``, None: no bound; none when ``named`` is false). Returns
 * the index of the first frame not taken, the topic, the bodies, the s values (None: no s),
 * and the indexes in the run of the frames that asked for a persisted ack; None when
 * payloads[start] starts no run. */
static PyObject *
plain_run(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "plain_run(payloads: list, start: int, named: bool, "
                        "last: int | None)");
        return NULL;
    }
    PyObject *payloads = args[0];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    int named = PyObject_IsTrue(args[2]);
    if (named < 0)
        return NULL;
    int bounded = args[3] != Py_None;
    uint64_t last = 0;
    if (bounded && as_u64(args[3], &last))
        bounded = 0;  /* (negative: no s is at or below it) */
    Py_ssize_t n = PyList_GET_SIZE(payloads), i = start;
    span topic = {NULL, -1};
    int with_s = 0;
    PyObject *bodies = NULL, *seqs = NULL, *acked = NULL, *topic_o = NULL;
    int failed = 0;
    if (start < 0)
        Py_RETURN_NONE;
    for (; i < n; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        if (!PyBytes_CheckExact(payload))
            break;
        const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(payload);
        Py_ssize_t len = PyBytes_GET_SIZE(payload);
        plain_parts pp;
        if (!parse_plain(d, len, &pp) || pp.t.len <= 0)
            break;
        int persisted = 0;
        if (pp.a.len >= 0) {
            if (!pp.has_s || pp.a.len != 9 || memcmp(pp.a.data, "persisted", 9) != 0)
                break;
            persisted = 1;
        }
        if (topic.len < 0) {  /* the first frame: the run's topic and form */
            topic_o = PyUnicode_DecodeUTF8(pp.t.data, pp.t.len, NULL);
            if (topic_o == NULL)
                goto bad_text;
            topic = pp.t;
            with_s = pp.has_s;
            bodies = PyList_New(0);
            acked = PyList_New(0);
            if (bodies == NULL || acked == NULL || (with_s && (seqs = PyList_New(0)) == NULL))
                goto fail;
        } else if (pp.t.len != topic.len || memcmp(pp.t.data, topic.data, (size_t)topic.len) != 0
                   || pp.has_s != with_s) {
            break;
        }
        if (pp.cid.len >= 0) {  /* (read only to be sure the general path would not refuse it) */
            PyObject *cid = PyUnicode_DecodeUTF8(pp.cid.data, pp.cid.len, NULL);
            if (cid == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto fail;
                PyErr_Clear();
                break;
            }
            Py_DECREF(cid);
        }
        if (with_s) {
            if (!named || (bounded && pp.seq <= last))
                break;  /* a republished message: one by one */
            bounded = 1;
            last = pp.seq;
            PyObject *s = PyLong_FromUnsignedLongLong(pp.seq);
            if (s == NULL || PyList_Append(seqs, s) < 0) {
                Py_XDECREF(s);
                goto fail;
            }
            Py_DECREF(s);
        }
        if (persisted) {
            PyObject *k = PyLong_FromSsize_t(PyList_GET_SIZE(bodies));
            if (k == NULL || PyList_Append(acked, k) < 0) {
                Py_XDECREF(k);
                goto fail;
            }
            Py_DECREF(k);
        }
        PyObject *body = PyBytes_FromStringAndSize((const char *)d + pp.end, len - pp.end);
        if (body == NULL || PyList_Append(bodies, body) < 0) {
            Py_XDECREF(body);
            goto fail;
        }
        Py_DECREF(body);
    }
    if (topic_o != NULL && PyList_GET_SIZE(bodies) > 0) {
        if (seqs == NULL) {
            Py_INCREF(Py_None);
            seqs = Py_None;
        }
        return Py_BuildValue("(nNNNN)", i, topic_o, bodies, seqs, acked);
    }
    goto done;  /* its first frame was refused: None */
bad_text:
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        goto fail;
    PyErr_Clear();  /* not UTF-8: the general parser says what is wrong (None) */
    goto done;
fail:
    failed = 1;
done:
    Py_XDECREF(topic_o);
    Py_XDECREF(bodies);
    Py_XDECREF(seqs);
    Py_XDECREF(acked);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* sow_frames(prefix, rows, with_key, stamps, start, end, batch) -> [frame, ...]
 *
 * The ``sow`` frames of a query result kept as stored rows, (SowKey as UTF-8, stored value)
 * pairs (sow/record.py has the value's layout: 36 fixed bytes, the bookmark, the headers, the
 * body): rows start..end-1, ``batch`` to a frame, each frame
 * ``len | prefix {"k":KEY,"bm":BM[,"ts":TS],"l":N}BODY...``. ``with_key``: write "k";
 * ``stamps``: the "ts" texts by row (None: no "ts"). Keys and bookmarks are written as JSON
 * strings the way msgspec writes them (\" \\ \b \t \n \f \r, other control bytes as \u00xx,
 * everything else as is). The twin is sow.record.sow_frames_py.
 */
static const char hexdigits[] = "0123456789abcdef";

static Py_ssize_t json_str_size(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t size = n + 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\' || c == '\b' || c == '\t' || c == '\n' || c == '\f'
                || c == '\r')
            size += 1;
        else if (c < 0x20)
            size += 5;
    }
    return size;
}

static unsigned char *put_json_str(unsigned char *p, const unsigned char *s, Py_ssize_t n)
{
    *p++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *p++ = c;
            continue;
        }
        *p++ = '\\';
        switch (c) {
        case '"': *p++ = '"'; break;
        case '\\': *p++ = '\\'; break;
        case '\b': *p++ = 'b'; break;
        case '\t': *p++ = 't'; break;
        case '\n': *p++ = 'n'; break;
        case '\f': *p++ = 'f'; break;
        case '\r': *p++ = 'r'; break;
        default:
            *p++ = 'u'; *p++ = '0'; *p++ = '0';
            *p++ = (unsigned char)hexdigits[c >> 4];
            *p++ = (unsigned char)hexdigits[c & 15];
        }
    }
    *p++ = '"';
    return p;
}

static Py_ssize_t dec_size(Py_ssize_t v)
{
    Py_ssize_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static unsigned char *put_dec(unsigned char *p, Py_ssize_t v)
{
    Py_ssize_t n = dec_size(v);
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)('0' + v % 10);
        v /= 10;
    }
    return p + n;
}

/* One stored row: its SowKey (the LMDB key past its 8-byte insert sequence), bookmark and
 * body (-1 and an exception set when the row is not a (bytes, bytes) pair, its key shorter
 * than a sequence or its value not a version-1 record). */
typedef struct {
    const unsigned char *key, *bm, *body;
    Py_ssize_t key_len, bm_len, body_len;
} stored;

static int read_stored(PyObject *row, Py_ssize_t i, stored *out)
{
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(row, 0))
            || !PyBytes_Check(PyTuple_GET_ITEM(row, 1))) {
        PyErr_SetString(PyExc_TypeError, "sow_frames() needs rows of (bytes, bytes)");
        return -1;
    }
    PyObject *k = PyTuple_GET_ITEM(row, 0), *v = PyTuple_GET_ITEM(row, 1);
    if (PyBytes_GET_SIZE(k) < 8) {
        PyErr_Format(PyExc_ValueError, "stored SOW row %zd: no insert sequence in its key", i);
        return -1;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(v);
    Py_ssize_t n = PyBytes_GET_SIZE(v);
    if (n >= 36 && d[1] == 1) {
        Py_ssize_t blen = (Py_ssize_t)d[2] << 8 | d[3];
        Py_ssize_t off = (Py_ssize_t)((uint32_t)d[32] << 24 | (uint32_t)d[33] << 16
                                      | (uint32_t)d[34] << 8 | (uint32_t)d[35]);
        if (36 + blen <= n && off <= n) {
            out->key = (const unsigned char *)PyBytes_AS_STRING(k) + 8;
            out->key_len = PyBytes_GET_SIZE(k) - 8;
            out->bm = d + 36;
            out->bm_len = blen;
            out->body = d + off;
            out->body_len = n - off;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "stored SOW record %zd: not a version 1 record", i);
    return -1;
}

static int stamp_item(PyObject *list, Py_ssize_t i, const unsigned char **s, Py_ssize_t *n)
{
    PyObject *o = PyList_GET_ITEM(list, i);
    if (!PyBytes_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "sow_frames() needs bytes stamps");
        return -1;
    }
    *s = (const unsigned char *)PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return 0;
}

/* The payload size of the sow frame of rows [first, last) (-1 and an exception set: a row or
 * stamp that is not what sow_frames takes, or a frame over 4 GiB). */
static Py_ssize_t batch_payload(PyObject *rows, PyObject *stamps, int with_key,
                                Py_ssize_t pre_len, Py_ssize_t first, Py_ssize_t last)
{
    Py_ssize_t size = pre_len;
    stored rec;
    const unsigned char *s;
    Py_ssize_t n;
    for (Py_ssize_t i = first; i < last; i++) {
        if (read_stored(PyList_GET_ITEM(rows, i), i, &rec) < 0)
            return -1;
        size += 12 + json_str_size(rec.bm, rec.bm_len) + dec_size(rec.body_len)
                + rec.body_len;  /* { "bm": ,"l": } */
        if (with_key)
            size += 5 + json_str_size(rec.key, rec.key_len);  /* "k": , */
        if (stamps != Py_None) {
            if (stamp_item(stamps, i, &s, &n) < 0)
                return -1;
            size += 8 + n;  /* ,"ts":"" */
        }
    }
    if (size > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_ValueError, "sow_frames: a frame over 4 GiB");
        return -1;
    }
    return size;
}

/* Write the sow frame of rows [first, last), its payload ``size`` bytes (batch_payload's: the
 * rows are checked), at p; returns the end. */
static unsigned char *put_batch(unsigned char *p, PyObject *rows, PyObject *stamps, int with_key,
                                const unsigned char *pre, Py_ssize_t pre_len, Py_ssize_t size,
                                Py_ssize_t first, Py_ssize_t last)
{
    stored rec;
    const unsigned char *s = NULL;  /* (set by stamp_item: initialised for the compiler) */
    Py_ssize_t n = 0;
    p = put_be32(p, (uint32_t)size);
    memcpy(p, pre, (size_t)pre_len);
    p += pre_len;
    for (Py_ssize_t i = first; i < last; i++) {
        read_stored(PyList_GET_ITEM(rows, i), i, &rec);  /* checked by batch_payload */
        *p++ = '{';
        if (with_key) {
            memcpy(p, "\"k\":", 4);
            p = put_json_str(p + 4, rec.key, rec.key_len);
            *p++ = ',';
        }
        memcpy(p, "\"bm\":", 5);
        p = put_json_str(p + 5, rec.bm, rec.bm_len);
        if (stamps != Py_None) {
            stamp_item(stamps, i, &s, &n);
            memcpy(p, ",\"ts\":\"", 7);
            memcpy(p + 7, s, (size_t)n);
            p += 7 + n;
            *p++ = '"';
        }
        memcpy(p, ",\"l\":", 5);
        p = put_dec(p + 5, rec.body_len);
        *p++ = '}';
        memcpy(p, rec.body, (size_t)rec.body_len);
        p += rec.body_len;
    }
    return p;
}

/* sow_frames(prefix, rows, with_key, stamps, start, end, batch, joined=False): the frames, a
 * list of bytes, or with ``joined`` one bytes of them all back to back (one allocation: what a
 * write of them all takes, without the join). */
static PyObject *
sow_frames(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 && nargs != 8) {
        PyErr_Format(PyExc_TypeError, "sow_frames() takes 7 or 8 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *prefix = args[0], *rows = args[1], *stamps = args[3];
    if (!PyBytes_Check(prefix) || !PyList_Check(rows)
            || (stamps != Py_None && !PyList_Check(stamps))) {
        PyErr_SetString(PyExc_TypeError,
                        "sow_frames(prefix: bytes, rows: list, with_key: bool, "
                        "stamps: list | None, start, end, batch, joined=False)");
        return NULL;
    }
    int with_key = PyObject_IsTrue(args[2]);
    if (with_key < 0)
        return NULL;
    int joined = nargs == 8 ? PyObject_IsTrue(args[7]) : 0;
    if (joined < 0)
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[4]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t end = PyLong_AsSsize_t(args[5]);
    if (end == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t batch = PyLong_AsSsize_t(args[6]);
    if (batch == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0 || start > end || end > PyList_GET_SIZE(rows) || batch < 1
            || (stamps != Py_None && PyList_GET_SIZE(stamps) < end)) {
        PyErr_SetString(PyExc_ValueError, "sow_frames: bad range");
        return NULL;
    }
    const unsigned char *pre = (const unsigned char *)PyBytes_AS_STRING(prefix);
    Py_ssize_t pre_len = PyBytes_GET_SIZE(prefix);
    if (joined) {
        Py_ssize_t total = 0;
        for (Py_ssize_t first = start; first < end; first += batch) {
            Py_ssize_t last = end - first > batch ? first + batch : end;
            Py_ssize_t size = batch_payload(rows, stamps, with_key, pre_len, first, last);
            if (size < 0)
                return NULL;
            total += 4 + size;
        }
        PyObject *all = PyBytes_FromStringAndSize(NULL, total);
        if (all == NULL)
            return NULL;
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(all);
        for (Py_ssize_t first = start; first < end; first += batch) {
            Py_ssize_t last = end - first > batch ? first + batch : end;
            Py_ssize_t size = batch_payload(rows, stamps, with_key, pre_len, first, last);
            p = put_batch(p, rows, stamps, with_key, pre, pre_len, size, first, last);
        }
        if (p != (unsigned char *)PyBytes_AS_STRING(all) + total) {  /* never */
            Py_DECREF(all);
            PyErr_SetString(PyExc_SystemError, "sow_frames: frame size miscounted");
            return NULL;
        }
        return all;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t first = start; first < end; first += batch) {
        Py_ssize_t last = end - first > batch ? first + batch : end;
        Py_ssize_t size = batch_payload(rows, stamps, with_key, pre_len, first, last);
        if (size < 0)
            goto fail;
        PyObject *frame = PyBytes_FromStringAndSize(NULL, 4 + size);
        if (frame == NULL)
            goto fail;
        unsigned char *p = put_batch((unsigned char *)PyBytes_AS_STRING(frame), rows, stamps,
                                     with_key, pre, pre_len, size, first, last);
        if (p != (unsigned char *)PyBytes_AS_STRING(frame) + 4 + size) {  /* never */
            Py_DECREF(frame);
            PyErr_SetString(PyExc_SystemError, "sow_frames: frame size miscounted");
            goto fail;
        }
        int rc = PyList_Append(out, frame);
        Py_DECREF(frame);
        if (rc < 0)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
crc32_py(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, value=0)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t start = 0;
    if (nargs == 2) {
        start = (uint32_t)PyLong_AsUnsignedLongMask(args[1]);
        if (PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    uint32_t crc;
    if (view.len < 65536) {
        crc = crc32_update(start, (const unsigned char *)view.buf, (size_t)view.len);
    } else {  /* (a segment's summary check, on a thread of its own: let the loop run) */
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_update(start, (const unsigned char *)view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* ---- SowKeys (sow/keys.py): BLAKE2b-64, personalised, of "len:domain" "len:value" -------- */

/* BLAKE2b as RFC 7693 specifies it, for an 8-byte digest with a personalisation and no key
 * or salt: what hashlib.blake2b(digest_size=8, person=...) computes. */
static const uint64_t b2b_iv[8] = {
    0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL, 0xA54FF53A5F1D36F1ULL,
    0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL, 0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL,
};

typedef struct {
    uint64_t h[8];
    uint64_t t;         /* bytes compressed so far (inputs here stay far below 2**64) */
    unsigned char b[128];
    size_t c;           /* bytes in b */
} b2b_state;

#define B2B_ROTR(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define B2B_G(a, b, c, d, x, y)                 \
    do {                                        \
        v[a] = v[a] + v[b] + (x);               \
        v[d] = B2B_ROTR(v[d] ^ v[a], 32);       \
        v[c] = v[c] + v[d];                     \
        v[b] = B2B_ROTR(v[b] ^ v[c], 24);       \
        v[a] = v[a] + v[b] + (y);               \
        v[d] = B2B_ROTR(v[d] ^ v[a], 16);       \
        v[c] = v[c] + v[d];                     \
        v[b] = B2B_ROTR(v[b] ^ v[c], 63);       \
    } while (0)

static uint64_t b2b_load64(const unsigned char *p)
{
#if PY_LITTLE_ENDIAN
    uint64_t x;
    memcpy(&x, p, 8);  /* one load: the byte-at-a-time loop below was a third of a hash */
    return x;
#else
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
#endif
}

/* A round of the compression, its row of the message schedule spelt out as constants so
 * that the compiler addresses m[] and v[] directly instead of through a table per round. */
#define B2B_ROUND(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15) \
    do {                                                                            \
        B2B_G(0, 4, 8, 12, m[s0], m[s1]);                                           \
        B2B_G(1, 5, 9, 13, m[s2], m[s3]);                                           \
        B2B_G(2, 6, 10, 14, m[s4], m[s5]);                                          \
        B2B_G(3, 7, 11, 15, m[s6], m[s7]);                                          \
        B2B_G(0, 5, 10, 15, m[s8], m[s9]);                                          \
        B2B_G(1, 6, 11, 12, m[s10], m[s11]);                                        \
        B2B_G(2, 7, 8, 13, m[s12], m[s13]);                                         \
        B2B_G(3, 4, 9, 14, m[s14], m[s15]);                                         \
    } while (0)

static void b2b_compress(b2b_state *s, int last)
{
    uint64_t v[16], m[16];
    for (int i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = b2b_iv[i];
    }
    v[12] ^= s->t;
    if (last)
        v[14] = ~v[14];
    for (int i = 0; i < 16; i++)
        m[i] = b2b_load64(s->b + 8 * i);
    /* RFC 7693's message schedule SIGMA, one row per round (rows 10 and 11 repeat 0 and 1) */
    B2B_ROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    B2B_ROUND(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
    B2B_ROUND(11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4);
    B2B_ROUND(7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8);
    B2B_ROUND(9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13);
    B2B_ROUND(2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9);
    B2B_ROUND(12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11);
    B2B_ROUND(13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10);
    B2B_ROUND(6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5);
    B2B_ROUND(10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0);
    B2B_ROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    B2B_ROUND(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
    for (int i = 0; i < 8; i++)
        s->h[i] ^= v[i] ^ v[i + 8];
}

static void b2b_init8(b2b_state *s, const unsigned char person[16])
{
    for (int i = 0; i < 8; i++)
        s->h[i] = b2b_iv[i];
    s->h[0] ^= 0x01010000ULL ^ 8;  /* fanout 1, depth 1, no key, 8-byte digest */
    s->h[6] ^= b2b_load64(person);
    s->h[7] ^= b2b_load64(person + 8);
    s->t = 0;
    s->c = 0;
}

static void b2b_update(b2b_state *s, const unsigned char *p, size_t n)
{
    while (n) {
        if (s->c == 128) {  /* a full block, and more input follows: not the last one */
            s->t += 128;
            b2b_compress(s, 0);
            s->c = 0;
        }
        size_t k = 128 - s->c;
        if (k > n)
            k = n;
        memcpy(s->b + s->c, p, k);
        s->c += k;
        p += k;
        n -= k;
    }
}

static uint64_t b2b_final8(b2b_state *s)
{
    s->t += s->c;
    memset(s->b + s->c, 0, 128 - s->c);
    b2b_compress(s, 1);
    return s->h[0];  /* the digest's 8 bytes, little-endian */
}

static const unsigned char sow_key_person[16] = "amps-sow-key";  /* zero-padded to 16 */

/* The decimal digits of ``v`` written backwards, ending just before ``end``: their start.
 * (snprintf's "%llu" gives the same text at several times the cost: a third of sow_key's.) */
static char *dec_u64(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

/* sow_key(prefix, value): the SowKey of a topic whose one Key field holds ``value``, where
 * ``prefix`` is the key domain as keys.py absorbs it (b"%d:%b" % (len(domain), domain)).
 * ``value`` an exact int that fits 64 bits, or an exact str (UTF-8; a lone surrogate
 * declines); anything else declines: None, and keys.py computes it the general way. */
static PyObject *sow_key_of(PyObject *prefix, PyObject *value);

static PyObject *
sow_key(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "sow_key(prefix: bytes, value)");
        return NULL;
    }
    return sow_key_of(args[0], args[1]);
}

/* Append the pair (a, b) to the list ``out``, taking the caller's references to both
 * (released on failure too); 0, or -1 with an exception set. */
static int append_pair(PyObject *out, PyObject *a, PyObject *b)
{
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(a);
        Py_DECREF(b);
        return -1;
    }
    PyTuple_SET_ITEM(pair, 0, a);
    PyTuple_SET_ITEM(pair, 1, b);
    int err = PyList_Append(out, pair);
    Py_DECREF(pair);
    return err;
}

/* sow_keyed(prefix, field, docs): [(doc, sow_key(prefix, doc.get(field))), ...] for the
 * documents of the list ``docs`` from its first on, up to (without) the first that is not an
 * exact dict or whose value sow_key declines (a missing field: None, declined); keys.py's
 * KeyGenerator.keyed goes on from there the general way. Twin: sow.keys.sow_keyed_py. */
static PyObject *
sow_keyed(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyUnicode_Check(args[1])
            || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "sow_keyed(prefix: bytes, field: str, docs: list)");
        return NULL;
    }
    PyObject *docs = args[2];
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    /* (the size is read again each time: a dict lookup may run a key's __eq__) */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(docs); i++) {
        PyObject *doc = PyList_GET_ITEM(docs, i);
        if (!PyDict_CheckExact(doc))
            break;
        Py_INCREF(doc);
        PyObject *v = PyDict_GetItemWithError(doc, args[1]);
        if (v == NULL) {
            Py_DECREF(doc);
            if (PyErr_Occurred())
                goto fail;
            break;  /* doc.get(field) is None: declined */
        }
        Py_INCREF(v);
        PyObject *key = sow_key_of(args[0], v);
        Py_DECREF(v);
        if (key == NULL || key == Py_None) {
            Py_DECREF(doc);
            if (key == NULL)
                goto fail;
            Py_DECREF(key);
            break;
        }
        if (append_pair(out, doc, key) < 0)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* sow_key's work: a new reference to the key (str) or to None (declined); NULL on error. */
static PyObject *
sow_key_of(PyObject *prefix, PyObject *value)
{
    char num[24];
    const char *text;
    Py_ssize_t len;
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow)
            Py_RETURN_NONE;
        if (x == -1 && PyErr_Occurred())
            return NULL;
        /* "%lld": the magnitude's digits (unsigned: LLONG_MIN's too), then the sign */
        char *t = dec_u64(num + sizeof num, x < 0 ? 0 - (uint64_t)x : (uint64_t)x);
        if (x < 0)
            *--t = '-';
        text = t;
        len = (Py_ssize_t)(num + sizeof num - t);
    } else if (PyUnicode_CheckExact(value)) {
        text = PyUnicode_AsUTF8AndSize(value, &len);
        if (text == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return NULL;
            PyErr_Clear();  /* a lone surrogate: keys.py encodes it with surrogatepass */
            Py_RETURN_NONE;
        }
    } else {
        Py_RETURN_NONE;
    }
    char head[24];  /* "%zd:" */
    head[sizeof head - 1] = ':';
    char *hd = dec_u64(head + sizeof head - 1, (uint64_t)len);
    b2b_state st;
    b2b_init8(&st, sow_key_person);
    b2b_update(&st, (const unsigned char *)PyBytes_AS_STRING(prefix),
               (size_t)PyBytes_GET_SIZE(prefix));
    b2b_update(&st, (const unsigned char *)hd, (size_t)(head + sizeof head - hd));
    b2b_update(&st, (const unsigned char *)text, (size_t)len);
    uint64_t h = b2b_final8(&st);
    uint64_t be = 0;  /* int.from_bytes(digest, "big"): the little-endian word byte-swapped */
    for (int i = 0; i < 8; i++)
        be = (be << 8) | ((h >> (8 * i)) & 0xFF);
    char out[24];  /* "%llu" */
    char *o = dec_u64(out + sizeof out, be);
    Py_ssize_t ol = (Py_ssize_t)(out + sizeof out - o);
    PyObject *key = PyUnicode_New(ol, 127);
    if (key != NULL)
        memcpy(PyUnicode_DATA(key), o, (size_t)ol);
    return key;
}


/* Whether the (document, SowKey) pair ``item`` (the caller holds a reference to it) has an
 * exact dict as its document whose ``field`` is an exact int within +-2**53: 1 (``*x`` set to
 * it), 0 (not), -1 (an exception set: a key's __eq__ raised). */
static int whole_field(PyObject *item, PyObject *field, long long *x)
{
    const long long exact = 1LL << 53;
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2)
        return 0;
    PyObject *doc = PyTuple_GET_ITEM(item, 0);
    if (!PyDict_CheckExact(doc))
        return 0;
    PyObject *v = PyDict_GetItemWithError(doc, field);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long r = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || r < -exact || r > exact)
        return 0;
    *x = r;
    return 1;
}

/* The leading run of the (document, SowKey) pairs of the list ``args[1]`` whose document's
 * field ``args[0]`` is a whole number within +-2**53 (whole_field): with ``rows``, the hash
 * index rows made for it (hash_int_rows), else only its length (int_run). */
static PyObject *
int_field_run(PyObject *const *args, Py_ssize_t nargs, int rows, const char *signature)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, signature);
        return NULL;
    }
    PyObject *keyed = args[1];
    PyObject *out = rows ? PyList_New(0) : NULL;
    if (rows && out == NULL)
        return NULL;
    Py_ssize_t i = 0;
    /* (the size is read again each time: a dict lookup may run a key's __eq__) */
    for (; i < PyList_GET_SIZE(keyed); i++) {
        PyObject *item = PyList_GET_ITEM(keyed, i);
        long long x;
        Py_INCREF(item);  /* (holds the document and the SowKey) */
        int w = whole_field(item, args[0], &x);
        if (w <= 0) {
            Py_DECREF(item);
            if (w < 0)
                goto fail;
            break;
        }
        if (!rows) {
            Py_DECREF(item);
            continue;
        }
        char buf[32];  /* len, "N", digits, ".0" */
        char *end = buf + sizeof buf;
        *--end = '0';
        *--end = '.';
        char *t = dec_u64(end, x < 0 ? 0 - (uint64_t)x : (uint64_t)x);
        if (x < 0)
            *--t = '-';
        *--t = 'N';
        Py_ssize_t plen = buf + sizeof buf - t;  /* len(p): at most 20 */
        *--t = (char)plen;
        PyObject *token = PyBytes_FromStringAndSize(t, buf + sizeof buf - t);
        if (token == NULL) {
            Py_DECREF(item);
            goto fail;
        }
        PyObject *skey = PyTuple_GET_ITEM(item, 1);
        Py_INCREF(skey);
        Py_DECREF(item);
        if (append_pair(out, token, skey) < 0)
            goto fail;
    }
    return rows ? out : PyLong_FromSsize_t(i);
fail:
    Py_XDECREF(out);
    return NULL;
}

/* int_run(field, keyed): how many (document, SowKey) pairs of the list ``keyed``, from its
 * first on, have a document whose ``field`` is a whole number within +-2**53 (whole_field):
 * the pairs hash_int_rows makes rows for, counted without making them.
 * Twin: sow.index.int_run_py. */
static PyObject *
int_run(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    return int_field_run(args, nargs, 0, "int_run(field: str, keyed: list)");
}

/* hash_int_rows(field, keyed): the hash index rows (composite token, SowKey) of a one-field
 * index on ``field`` for the (document, SowKey) pairs of the list ``keyed`` from its first on,
 * up to (without) the first that is not an exact 2-tuple, whose document is not an exact dict
 * or whose ``field`` is not an exact int within +-2**53: the token is then
 * bytes((len(p),)) + p with p = b"N%d.0" % value (repr(float(value)), as sow/index.py's
 * _num_token gives it), and HashIndex.add_run goes on from there one by one.
 * Twin: sow.index.hash_int_rows_py. */
static PyObject *
hash_int_rows(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    return int_field_run(args, nargs, 1, "hash_int_rows(field: str, keyed: list)");
}

/* record_keys(lk_of, keyed, seq): the LMDB key of each SowKey of ``keyed`` (a list of
 * (document, SowKey) pairs) in the dict ``lk_of`` (SowKey -> LMDB key); a SowKey it lacks gets
 * the next insert sequence: seq + 1 as 8 big-endian bytes followed by the SowKey's UTF-8, put
 * into ``lk_of``.  Returns (the keys, the last sequence given).
 * Twin: sow.storage.lmdb_keys.record_keys_py. */
static PyObject *
record_keys(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_CheckExact(args[0]) || !PyList_Check(args[1])
            || !PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "record_keys(lk_of: dict, keyed: list, seq: int)");
        return NULL;
    }
    PyObject *lk_of = args[0], *keyed = args[1];
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[2]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keyed);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PyList_GET_SIZE(keyed)) {  /* (shrunk by a key's __eq__: none here) */
            PyErr_SetString(PyExc_RuntimeError, "record_keys: the list changed");
            goto fail;
        }
        PyObject *item = PyList_GET_ITEM(keyed, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2
                || !PyUnicode_CheckExact(PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "record_keys: keyed holds (document, str) pairs");
            goto fail;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 1);
        Py_INCREF(item);
        PyObject *lk = PyDict_GetItemWithError(lk_of, key);
        if (lk != NULL) {
            Py_INCREF(lk);
        } else {
            if (PyErr_Occurred()) {
                Py_DECREF(item);
                goto fail;
            }
            Py_ssize_t klen;
            const char *k = PyUnicode_AsUTF8AndSize(key, &klen);
            if (k == NULL) {
                Py_DECREF(item);
                goto fail;
            }
            lk = PyBytes_FromStringAndSize(NULL, 8 + klen);
            if (lk == NULL) {
                Py_DECREF(item);
                goto fail;
            }
            unsigned long long next = seq + 1;
            unsigned char *b = (unsigned char *)PyBytes_AS_STRING(lk);
            for (int j = 7; j >= 0; j--, next >>= 8)
                b[j] = (unsigned char)(next & 0xff);
            memcpy(b + 8, k, (size_t)klen);
            if (PyDict_SetItem(lk_of, key, lk) < 0) {
                Py_DECREF(lk);
                Py_DECREF(item);
                goto fail;
            }
            seq++;
        }
        Py_DECREF(item);
        PyList_SET_ITEM(out, i, lk);
    }
    PyObject *last = PyLong_FromUnsignedLongLong(seq);
    if (last == NULL)
        goto fail;
    PyObject *res = PyTuple_Pack(2, out, last);
    Py_DECREF(out);
    Py_DECREF(last);
    return res;
fail:
    Py_DECREF(out);
    return NULL;
}

/* bookmark_strs(recs): [f"{r.publisher_id}|{r.sequence}|" for r in recs] (journal/record.py's
 * bookmark_str of each journal record of the list ``recs``), or None when one of them has a
 * publisher_id or sequence that is not an exact int in 0..2**64-1 (then the caller's
 * f-strings). Twin: journal.record.bookmark_strs_py. */
static PyObject *
bookmark_strs(PyObject *Py_UNUSED(module), PyObject *recs)
{
    static PyObject *pid_name, *seq_name;
    if (!PyList_Check(recs)) {
        PyErr_SetString(PyExc_TypeError, "bookmark_strs(recs: list)");
        return NULL;
    }
    if (pid_name == NULL) {
        pid_name = PyUnicode_InternFromString("publisher_id");
        seq_name = PyUnicode_InternFromString("sequence");
        if (pid_name == NULL || seq_name == NULL) {
            Py_CLEAR(pid_name);
            Py_CLEAR(seq_name);
            return NULL;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(recs);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PyList_GET_SIZE(recs)) {  /* (an attribute's code shortened the list) */
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *rec = PyList_GET_ITEM(recs, i);
        Py_INCREF(rec);
        PyObject *parts[2];
        parts[0] = PyObject_GetAttr(rec, pid_name);
        parts[1] = parts[0] == NULL ? NULL : PyObject_GetAttr(rec, seq_name);
        Py_DECREF(rec);
        if (parts[1] == NULL) {
            Py_XDECREF(parts[0]);
            goto fail;
        }
        char buf[48];  /* two 20-digit numbers, two bars */
        char *end = buf + sizeof buf;
        char *t = end;
        int ok = 1;
        for (int k = 1; k >= 0 && ok; k--) {
            unsigned long long x = 0;
            if (!PyLong_CheckExact(parts[k])) {
                ok = 0;
                break;
            }
            x = PyLong_AsUnsignedLongLong(parts[k]);
            if (x == (unsigned long long)-1 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                    ok = -1;
                else {
                    PyErr_Clear();  /* negative, or past 64 bits */
                    ok = 0;
                }
                break;
            }
            *--t = '|';
            t = dec_u64(t, (uint64_t)x);
        }
        Py_DECREF(parts[0]);
        Py_DECREF(parts[1]);
        if (ok < 0)
            goto fail;
        if (!ok) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        Py_ssize_t len = end - t;
        PyObject *bm = PyUnicode_New(len, 127);
        if (bm == NULL)
            goto fail;
        memcpy(PyUnicode_DATA(bm), t, (size_t)len);
        PyList_SET_ITEM(out, i, bm);
    }
    return out;
fail:
    Py_DECREF(out);  /* (unset items are NULL: list_dealloc skips them) */
    return NULL;
}

static void put_be(unsigned char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* sow_values(version, bodies, bookmarks, positions, timestamps): the stored SOW value of each
 * record without expiration or headers, as sow.record.encode_record lays it out (the fixed
 * ">BBHIQddI" part, the bookmark's UTF-8, the body). ``bodies``: bytes-like; ``bookmarks``:
 * str; ``positions``: int (0..2**64-1); ``timestamps``: float; lists of the same length. */
static PyObject *
sow_values(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyLong_Check(args[0]) || !PyList_Check(args[1])
            || !PyList_Check(args[2]) || !PyList_Check(args[3]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "sow_values(version: int, bodies: list, "
                        "bookmarks: list, positions: list, timestamps: list)");
        return NULL;
    }
    long version = PyLong_AsLong(args[0]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    PyObject *bodies = args[1], *marks = args[2], *positions = args[3], *stamps = args[4];
    Py_ssize_t n = PyList_GET_SIZE(bodies);
    if (PyList_GET_SIZE(marks) != n || PyList_GET_SIZE(positions) != n
            || PyList_GET_SIZE(stamps) != n) {
        PyErr_SetString(PyExc_ValueError, "sow_values: lists of different lengths");
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *mark = PyList_GET_ITEM(marks, i);
        Py_ssize_t blen;
        const char *bm = PyUnicode_Check(mark) ? PyUnicode_AsUTF8AndSize(mark, &blen) : NULL;
        if (bm == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "sow_values: a bookmark is not a str");
            goto fail;
        }
        if (blen > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "sow_values: bookmark too long");
            goto fail;
        }
        unsigned long long pos = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(positions, i));
        if (pos == (unsigned long long)-1 && PyErr_Occurred())
            goto fail;
        double ts = PyFloat_AsDouble(PyList_GET_ITEM(stamps, i));
        if (ts == -1.0 && PyErr_Occurred())
            goto fail;
        Py_buffer body;
        if (PyObject_GetBuffer(PyList_GET_ITEM(bodies, i), &body, PyBUF_SIMPLE) < 0)
            goto fail;
        Py_ssize_t off = 36 + blen;
        PyObject *v = PyBytes_FromStringAndSize(NULL, off + body.len);
        if (v == NULL) {
            PyBuffer_Release(&body);
            goto fail;
        }
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(v);
        uint64_t tsbits, zero = 0;
        memcpy(&tsbits, &ts, 8);
        p[0] = (unsigned char)(off < 256 ? off : 0);
        p[1] = (unsigned char)version;
        put_be(p + 2, (uint64_t)blen, 2);
        put_be(p + 4, 0, 4);  /* no headers */
        put_be(p + 8, (uint64_t)pos, 8);
        put_be(p + 16, tsbits, 8);
        put_be(p + 24, zero, 8);  /* no expiration: 0.0 */
        put_be(p + 32, (uint64_t)off, 4);
        memcpy(p + 36, bm, (size_t)blen);
        memcpy(p + off, body.buf, (size_t)body.len);
        PyBuffer_Release(&body);
        PyList_SET_ITEM(out, i, v);
    }
    return out;
fail:
    Py_DECREF(out);  /* (unset items are NULL: list_dealloc skips them) */
    return NULL;
}

#ifndef _WIN32
/* Syncer: the transaction log's group fdatasync on a thread of its own that never takes the
 * GIL (server/txlog.py). The event loop hands it the fds to sync and the journal position
 * they make durable (start); the thread syncs them, then the directory when asked. While it
 * syncs, the loop may write more to the same active file and say so (extend): the thread
 * then syncs that file again at once, without waiting for the loop, as often as it is
 * extended. After each sync it records the position now durable (synced) and writes 8 bytes
 * to the wake fd (a pipe the loop reads), so the loop hears of it at its next poll, or sooner
 * by asking. A Python worker would need the GIL twice per sync, each time waiting up to the
 * switch interval behind the loop; this thread only needs a CPU. One sync at a time: start
 * refuses until the last one's result is taken, so the fds it was given stay open until then. */
#include <pthread.h>
#include <unistd.h>
#include <errno.h>

enum { SYNC_IDLE = 0, SYNC_RUNNING = 1, SYNC_DONE = 2 };

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* signalled on a request, on a finished sync and on stop */
    int started;        /* the thread exists and has not been joined */
    int stop;
    int state;
    int err;            /* 0, or the errno of the call that failed */
    int *fds;           /* the last one is the active file, the one an extension syncs */
    Py_ssize_t nfds;
    int dir_fd;         /* fsynced after the fds on the first pass; -1: none */
    long long target;   /* what the pass running now makes durable */
    long long more;     /* what the loop wrote since (extend); > target: one more pass */
    long long synced;   /* the highest target a pass completed */
    int wake_fd;
} SyncerObject;

static int
sync_fd(int fd, int full)
{
    int rc;
    do {
        rc = full ? fsync(fd) : fdatasync(fd);
    } while (rc != 0 && errno == EINTR);
    return rc == 0 ? 0 : errno;
}

static void *
syncer_main(void *arg)
{
    SyncerObject *s = (SyncerObject *)arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->state != SYNC_RUNNING && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->state != SYNC_RUNNING)
            break;  /* stopped, and nothing asked of it */
        /* fds and dir_fd do not change while RUNNING: start refuses then */
        Py_ssize_t first = 0;
        int dir_fd = s->dir_fd;
        for (;;) {
            pthread_mutex_unlock(&s->mu);
            int err = 0;
            for (Py_ssize_t i = first; i < s->nfds && err == 0; i++)
                err = sync_fd(s->fds[i], 0);
            if (err == 0 && dir_fd >= 0)
                err = sync_fd(dir_fd, 1);
            pthread_mutex_lock(&s->mu);
            if (err == 0)
                s->synced = s->target;
            if (err != 0 || s->more <= s->target) {
                s->err = err;
                s->state = SYNC_DONE;
                pthread_cond_broadcast(&s->cv);
            }
            if (s->wake_fd >= 0) {
                uint64_t one = 1;
                ssize_t w = write(s->wake_fd, &one, sizeof one);  /* full pipe: one is pending */
                (void)w;
            }
            if (s->state == SYNC_DONE)
                break;
            s->target = s->more;  /* written to the active file since: sync it again */
            first = s->nfds - 1;
            dir_fd = -1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static PyObject *
Syncer_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    int wake_fd;
    static char *kwlist[] = {"wake_fd", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i:Syncer", kwlist, &wake_fd))
        return NULL;
    SyncerObject *s = (SyncerObject *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->wake_fd = wake_fd;
    s->dir_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = pthread_create(&s->thread, NULL, syncer_main, s);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    s->started = 1;
    return (PyObject *)s;
}

static void
syncer_join(SyncerObject *s)
{
    if (!s->started)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);  /* after the sync it was running, if any */
    Py_END_ALLOW_THREADS
    s->started = 0;
}

static void
Syncer_dealloc(SyncerObject *s)
{
    syncer_join(s);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    PyMem_Free(s->fds);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* an fd argument: an int from -1 up; -2 with an exception set otherwise */
static int
fd_arg(PyObject *o)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -2;
    if (v < -1 || v > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return -2;
    }
    return (int)v;
}

static PyObject *
Syncer_start(SyncerObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "start(fds, dir_fd, target)");
        return NULL;
    }
    int dir_fd = fd_arg(args[1]);
    if (dir_fd == -2)
        return NULL;
    long long target = PyLong_AsLongLong(args[2]);
    if (target == -1 && PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "start: fds must be a sequence of ints");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "start: no file to sync");
        return NULL;
    }
    int *fds = PyMem_Malloc(sizeof(int) * (size_t)n);
    if (fds == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd = fd_arg(PySequence_Fast_GET_ITEM(seq, i));
        if (fd < 0) {
            if (fd == -1)
                PyErr_SetString(PyExc_ValueError, "not a file descriptor");
            PyMem_Free(fds);
            Py_DECREF(seq);
            return NULL;
        }
        fds[i] = fd;
    }
    Py_DECREF(seq);
    pthread_mutex_lock(&s->mu);
    const char *refused = !s->started || s->stop ? "the syncer is closed"
        : s->state != SYNC_IDLE ? "a sync is running or its result was not taken" : NULL;
    if (refused == NULL) {
        PyMem_Free(s->fds);
        s->fds = fds;
        s->nfds = n;
        s->dir_fd = dir_fd;
        s->target = s->more = target;
        s->err = 0;
        s->state = SYNC_RUNNING;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (refused != NULL) {
        PyMem_Free(fds);
        PyErr_SetString(PyExc_RuntimeError, refused);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Syncer_extend(SyncerObject *s, PyObject *arg)
{
    long long target = PyLong_AsLongLong(arg);
    if (target == -1 && PyErr_Occurred())
        return NULL;
    pthread_mutex_lock(&s->mu);
    int taken = s->state == SYNC_RUNNING;
    if (taken && target > s->more)
        s->more = target;
    pthread_mutex_unlock(&s->mu);
    return PyBool_FromLong(taken);
}

static PyObject *
Syncer_synced(SyncerObject *s, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&s->mu);
    long long synced = s->synced;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLongLong(synced);
}

static PyObject *
Syncer_result(SyncerObject *s, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&s->mu);
    int done = s->state == SYNC_DONE;
    int err = s->err;
    long long synced = s->synced;
    if (done)
        s->state = SYNC_IDLE;
    pthread_mutex_unlock(&s->mu);
    if (!done)
        Py_RETURN_NONE;
    return Py_BuildValue("(iL)", err, synced);
}

static PyObject *
Syncer_wait(SyncerObject *s, PyObject *Py_UNUSED(ignored))
{
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->mu);
    while (s->state == SYNC_RUNNING)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    Py_END_ALLOW_THREADS
    return Syncer_result(s, NULL);
}

static PyObject *
Syncer_close(SyncerObject *s, PyObject *Py_UNUSED(ignored))
{
    syncer_join(s);
    Py_RETURN_NONE;
}

static PyMethodDef Syncer_methods[] = {
    {"start", (PyCFunction)(void (*)(void))Syncer_start, METH_FASTCALL,
     "start(fds, dir_fd, target): fdatasync each fd, then fsync dir_fd unless it is -1; "
     "target is the position that makes durable."},
    {"extend", (PyCFunction)Syncer_extend, METH_O,
     "extend(target): more was written to the active file (the last fd): sync it again up to "
     "target. False when the sync has already ended (start another)."},
    {"synced", (PyCFunction)Syncer_synced, METH_NOARGS,
     "The highest target a sync completed (so far)."},
    {"result", (PyCFunction)Syncer_result, METH_NOARGS,
     "(errno or 0, synced) of the ended sync, taken (the syncer is idle again); None while it "
     "runs or when idle."},
    {"wait", (PyCFunction)Syncer_wait, METH_NOARGS,
     "Block (without the GIL) until the running sync ends, then result()."},
    {"close", (PyCFunction)Syncer_close, METH_NOARGS,
     "Stop the thread after the sync it runs, if any (its result can still be taken)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SyncerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amps_emulator._speedups.Syncer",
    .tp_basicsize = sizeof(SyncerObject),
    .tp_dealloc = (destructor)Syncer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Syncer(wake_fd): the transaction log's group fdatasync on a thread without the GIL.",
    .tp_methods = Syncer_methods,
    .tp_new = Syncer_new,
};
#endif  /* !_WIN32 */


/* ---- Filler: a large frame's body received in pieces -------------------------------------
 * Filler(size): a bytes object of size bytes, not yet shared with anything, that write()
 * fills piece by piece as reads arrive and take() hands out whole once every byte is there.
 * The frame decoder copies each read into it as it comes (a small copy per read) instead of
 * growing a buffer and copying the whole body out of it at the end (tens of ms of one loop
 * pass for 32 MiB). Twin: protocol.codec.FillerPy. */
typedef struct {
    PyObject_HEAD
    PyObject *data;        /* the bytes being filled; NULL once taken */
    Py_ssize_t size;
    Py_ssize_t filled;
} FillerObject;

static PyObject *
Filler_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Py_ssize_t size;
    static char *kwlist[] = {"size", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n:Filler", kwlist, &size))
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "Filler: negative size");
        return NULL;
    }
    FillerObject *f = (FillerObject *)type->tp_alloc(type, 0);
    if (f == NULL)
        return NULL;
    f->data = PyBytes_FromStringAndSize(NULL, size);
    if (f->data == NULL) {
        Py_DECREF(f);
        return NULL;
    }
    f->size = size;
    return (PyObject *)f;
}

static void
Filler_dealloc(FillerObject *f)
{
    Py_XDECREF(f->data);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

/* write(data, start): copy data[start:] into the free part, as much as fits; how many bytes. */
static PyObject *
Filler_write(FillerObject *f, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "write(data, start) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (f->data == NULL) {
        PyErr_SetString(PyExc_ValueError, "Filler: already taken");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "Filler.write: start out of range");
        return NULL;
    }
    Py_ssize_t n = view.len - start;
    if (n > f->size - f->filled)
        n = f->size - f->filled;
    memcpy(PyBytes_AS_STRING(f->data) + f->filled, (const char *)view.buf + start, (size_t)n);
    f->filled += n;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(n);
}

static PyObject *
Filler_take(FillerObject *f, PyObject *Py_UNUSED(ignored))
{
    if (f->data == NULL || f->filled != f->size) {
        PyErr_SetString(PyExc_ValueError, "Filler.take: not filled (or taken already)");
        return NULL;
    }
    PyObject *data = f->data;
    f->data = NULL;
    return data;
}

static PyObject *
Filler_remaining(FillerObject *f, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(f->size - f->filled);
}

static PyObject *
Filler_filled(FillerObject *f, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(f->filled);
}

static PyMethodDef Filler_methods[] = {
    {"write", (PyCFunction)(void (*)(void))Filler_write, METH_FASTCALL,
     "write(data, start): copy data[start:] into the free part, as much as fits; how many bytes."},
    {"take", (PyCFunction)Filler_take, METH_NOARGS,
     "The filled bytes (once every byte is written); the filler holds nothing after."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Filler_getset[] = {
    {"remaining", (getter)Filler_remaining, NULL, "Bytes still to write.", NULL},
    {"filled", (getter)Filler_filled, NULL, "Bytes written so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FillerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amps_emulator._speedups.Filler",
    .tp_basicsize = sizeof(FillerObject),
    .tp_dealloc = (destructor)Filler_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Filler(size): a bytes object of size bytes filled piece by piece, then taken whole.",
    .tp_methods = Filler_methods,
    .tp_getset = Filler_getset,
    .tp_new = Filler_new,
};


/* frame_parts(head, sids, tail, body): one AMPS frame whose header is head + sids + tail and
 * whose body is body: the 4-byte big-endian length, then the four, in one allocation (a
 * fan-out delivery: every subscriber's frame shares the header but for the sids).
 * Twin: protocol.codec.frame_parts_py. */
static PyObject *
frame_parts(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "frame_parts(head, sids, tail, body) takes 4 arguments");
        return NULL;
    }
    Py_buffer views[4];
    int got = 0;
    PyObject *out = NULL;
    Py_ssize_t total = 0;
    for (; got < 4; got++) {
        if (PyObject_GetBuffer(args[got], &views[got], PyBUF_SIMPLE) < 0)
            goto done;
        total += views[got].len;
    }
    if ((unsigned long long)total > 0xFFFFFFFFULL) {
        PyErr_SetString(PyExc_OverflowError, "int too big to convert");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, total + 4);
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    w[0] = (unsigned char)(total >> 24);
    w[1] = (unsigned char)(total >> 16);
    w[2] = (unsigned char)(total >> 8);
    w[3] = (unsigned char)total;
    w += 4;
    for (int i = 0; i < 4; i++) {
        memcpy(w, views[i].buf, (size_t)views[i].len);
        w += views[i].len;
    }
done:
    while (got > 0)
        PyBuffer_Release(&views[--got]);
    return out;
}

/* fan_send(targets, head, tail, body): for each (send, sids, ...) tuple of the list ``targets``,
 * send(frame_parts(head, sids, tail, body)); returns the bytes of the frames sent (a fan-out's
 * deliveries to the connections of a plan, without a Python loop).
 * Twin: server.delivery.plan.fan_send_py. */
static PyObject *
fan_send(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_Check(args[0]) || !PyBytes_Check(args[1])
            || !PyBytes_Check(args[2]) || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "fan_send(targets: list, head: bytes, tail: bytes, body: bytes)");
        return NULL;
    }
    PyObject *targets = args[0];
    const char *head = PyBytes_AS_STRING(args[1]), *tail = PyBytes_AS_STRING(args[2]);
    const char *body = PyBytes_AS_STRING(args[3]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[1]), tail_len = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t body_len = PyBytes_GET_SIZE(args[3]);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(targets); i++) {
        PyObject *item = PyList_GET_ITEM(targets, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2
                || !PyBytes_Check(PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "fan_send() needs (send, sids: bytes, ...) tuples");
            return NULL;
        }
        PyObject *send = PyTuple_GET_ITEM(item, 0), *sids = PyTuple_GET_ITEM(item, 1);
        Py_ssize_t sids_len = PyBytes_GET_SIZE(sids);
        Py_ssize_t size = head_len + sids_len + tail_len + body_len;
        if ((unsigned long long)size > 0xFFFFFFFFULL) {
            PyErr_SetString(PyExc_OverflowError, "int too big to convert");
            return NULL;
        }
        PyObject *frame = PyBytes_FromStringAndSize(NULL, size + 4);
        if (frame == NULL)
            return NULL;
        unsigned char *w = put_be32((unsigned char *)PyBytes_AS_STRING(frame), (uint32_t)size);
        memcpy(w, head, (size_t)head_len);
        w += head_len;
        memcpy(w, PyBytes_AS_STRING(sids), (size_t)sids_len);
        w += sids_len;
        memcpy(w, tail, (size_t)tail_len);
        memcpy(w + tail_len, body, (size_t)body_len);
        Py_INCREF(send);  /* (the send may drop the plan that holds it) */
        PyObject *r = PyObject_CallOneArg(send, frame);
        Py_DECREF(send);
        Py_DECREF(frame);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        total += size + 4;
    }
    return PyLong_FromSsize_t(total);
}

/* ---- replay_frames: journal frames straight to a replay's p frames ---------------------- */

/* A growing output buffer (PyMem). */
typedef struct {
    unsigned char *buf;
    Py_ssize_t len, cap;
} outbuf;

static unsigned char *out_reserve(outbuf *o, Py_ssize_t n)
{
    if (o->len + n > o->cap) {
        Py_ssize_t cap = o->cap ? o->cap : 65536;
        while (cap < o->len + n)
            cap *= 2;
        unsigned char *b = PyMem_Realloc(o->buf, (size_t)cap);
        if (b == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        o->buf = b;
        o->cap = cap;
    }
    return o->buf + o->len;
}

static inline uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get_le64(const unsigned char *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

/* The big-endian unsigned int of the ``n`` (at most 8) bytes at ``p``. */
static inline uint64_t get_be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* A MessagePack str at *pp (nil too when nil_ok: then *s is NULL): 1 read, 0 anything else
 * (or too short). */
/* The length of the MessagePack array or map at *pp: ``fix`` is its fix family's first byte
 * (0x90 arrays, 0x80 maps: 16 lengths), ``wide`` its 16-bit tag (0xdc, 0xde; the 32-bit tag
 * follows it). 1 read (*pp past it), 0 another type or too short. */
static int mp_len(const unsigned char **pp, const unsigned char *end, unsigned char fix,
                  unsigned char wide, uint32_t *len)
{
    const unsigned char *p = *pp;
    if (p >= end)
        return 0;
    unsigned char b = *p++;
    if (b >= fix && b <= fix + 0x0f) {
        *len = b & 0x0f;
    } else if (b == wide || b == wide + 1) {
        int w = b == wide ? 2 : 4;
        if (end - p < w)
            return 0;
        *len = (uint32_t)get_be(p, w);
        p += w;
    } else {
        return 0;
    }
    *pp = p;
    return 1;
}

static int mp_str(const unsigned char **pp, const unsigned char *end, int nil_ok,
                  const unsigned char **s, Py_ssize_t *n)
{
    const unsigned char *p = *pp;
    if (p >= end)
        return 0;
    unsigned char b = *p++;
    Py_ssize_t len;
    if (b >= 0xa0 && b <= 0xbf) {
        len = b & 0x1f;
    } else if (b == 0xd9 || b == 0xda || b == 0xdb) {
        int w = b == 0xd9 ? 1 : b == 0xda ? 2 : 4;
        if (end - p < w)
            return 0;
        len = (Py_ssize_t)get_be(p, w);
        p += w;
    } else if (b == 0xc0 && nil_ok) {
        *s = NULL;
        *n = 0;
        *pp = p;
        return 1;
    } else {
        return 0;
    }
    if (end - p < len)
        return 0;
    *s = p;
    *n = len;
    *pp = p + len;
    return 1;
}

/* A MessagePack int or nil at *pp: 1 read (*is_nil, *neg: the value is the int64 *v, else
 * the uint64 *u), 0 anything else. */
static int mp_int(const unsigned char **pp, const unsigned char *end, int *is_nil, int *neg,
                  int64_t *v, uint64_t *u)
{
    const unsigned char *p = *pp;
    if (p >= end)
        return 0;
    unsigned char b = *p++;
    *is_nil = 0;
    *neg = 0;
    if (b <= 0x7f) {
        *u = b;
    } else if (b >= 0xe0) {
        *neg = 1;
        *v = (int8_t)b;
    } else if (b == 0xc0) {
        *is_nil = 1;
    } else if (b >= 0xcc && b <= 0xcf) {
        int w = 1 << (b - 0xcc);
        if (end - p < w)
            return 0;
        *u = get_be(p, w);
        p += w;
    } else if (b >= 0xd0 && b <= 0xd3) {
        int w = 1 << (b - 0xd0);
        if (end - p < w)
            return 0;
        uint64_t x = get_be(p, w);
        p += w;
        int64_t sx = w == 1 ? (int8_t)x : w == 2 ? (int16_t)x : w == 4 ? (int32_t)x : (int64_t)x;
        if (sx < 0) {
            *neg = 1;
            *v = sx;
        } else {
            *u = (uint64_t)sx;
        }
    } else {
        return 0;
    }
    *pp = p;
    return 1;
}

static int all_ascii(const unsigned char *s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] >= 0x80)
            return 0;
    return 1;
}

static unsigned char *put_u64(unsigned char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = (unsigned char)tmp[--n];
    return p;
}

/* What replay_frames read of one publish's payload. */
typedef struct {
    const unsigned char *topic, *mt, *corr, *key, *body;
    Py_ssize_t topic_len, mt_len, corr_len, key_len, body_len;
    int has_exp, exp_neg;
    int64_t exp_v;
    uint64_t exp_u;
} replayed;

/* Read the payload [p, end) of a record (MessagePack array of at least 8: topic, type,
 * client name, correlation id, SowKey, expiration, headers, body): 1 read, 0 not in the
 * shapes handled here. */
static int read_replayed(const unsigned char *p, const unsigned char *end, replayed *r)
{
    uint32_t count;
    if (!mp_len(&p, end, 0x90, 0xdc, &count))
        return 0;
    const unsigned char *cname;
    Py_ssize_t cname_len;
    int is_nil;
    if (count < 8 || !mp_str(&p, end, 0, &r->topic, &r->topic_len)
            || !mp_str(&p, end, 0, &r->mt, &r->mt_len)
            || !mp_str(&p, end, 0, &cname, &cname_len)
            || !mp_str(&p, end, 1, &r->corr, &r->corr_len)
            || !mp_str(&p, end, 1, &r->key, &r->key_len)
            || !mp_int(&p, end, &is_nil, &r->exp_neg, &r->exp_v, &r->exp_u))
        return 0;
    r->has_exp = !is_nil;
    uint32_t pairs;
    if (!mp_len(&p, end, 0x80, 0xde, &pairs))
        return 0;
    for (uint32_t i = 0; i < pairs; i++) {
        const unsigned char *s;
        Py_ssize_t n;
        if (!mp_str(&p, end, 0, &s, &n) || !mp_str(&p, end, 0, &s, &n))
            return 0;
    }
    if (p >= end)
        return 0;
    unsigned char b = *p++;
    if (b != 0xc4 && b != 0xc5 && b != 0xc6)
        return 0;
    int w = b == 0xc4 ? 1 : b == 0xc5 ? 2 : 4;
    if (end - p < w)
        return 0;
    Py_ssize_t len = (Py_ssize_t)get_be(p, w);
    p += w;
    if (end - p < len)
        return 0;
    r->body = p;
    r->body_len = len;
    return 1;
}

/* replay_frames(data, start, next_pos, limit, name, mt, head, max_records, max_bytes): the
 * p frames a bookmark replay of the literal topic ``name`` (of message type ``mt``; json also
 * takes records that name no type) delivers from the journal frames in ``data`` (a segment's
 * bytes as on disk) from offset ``start``: records before position ``next_pos`` are passed
 * over, the replay stops before the first past ``limit``. Each delivery is ``head`` (the
 * header up to the sids value, included), then ``,"bm":"PUB|SEQ|"`` with ``"x"``, ``"k"``,
 * ``"e"`` when the record has them, ``}``, then the body. Journal-internal records (kind 64 and
 * up) are passed over; every other record read moves the replay on (next_pos, the last
 * position and bookmark). Stops after ``max_records`` deliveries or once ``max_bytes`` are
 * framed, at the end of the whole frames in ``data``, or at a frame it does not handle (a bad
 * magic, CRC or version, a publish's payload outside the plain shapes): the caller reads
 * that one the general way.
 * Returns (offset of the first frame not read, next_pos, last position or 0, last publisher id,
 * last sequence, deliveries, the frames, why it stopped: 0 end of data, 1 limit, 2 budget,
 * 3 a frame for the general way, the records read (moving the replay on), their bodies'
 * bytes). A delivery whose correlation id or SowKey is not ASCII is the general way's too.
 * Twin: server.delivery.replay_frames.replay_frames_py. */
static PyObject *
replay_frames(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[4])
            || !PyBytes_Check(args[5]) || !PyBytes_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "replay_frames(data: bytes, start, next_pos, limit, name: bytes, "
                        "mt: bytes, head: bytes, max_records, max_bytes)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    unsigned long long next_pos = PyLong_AsUnsignedLongLong(args[2]);
    if (next_pos == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    long long limit = PyLong_AsLongLong(args[3]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t max_records = PyLong_AsSsize_t(args[7]);
    if (max_records == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[8]);
    if (max_bytes == -1 && PyErr_Occurred())
        return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (start < 0 || start > size) {
        PyErr_SetString(PyExc_ValueError, "replay_frames: start out of range");
        return NULL;
    }
    const unsigned char *name = (const unsigned char *)PyBytes_AS_STRING(args[4]);
    Py_ssize_t name_len = PyBytes_GET_SIZE(args[4]);
    const unsigned char *mt = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    Py_ssize_t mt_len = PyBytes_GET_SIZE(args[5]);
    int json = mt_len == 4 && memcmp(mt, "json", 4) == 0;
    const unsigned char *head = (const unsigned char *)PyBytes_AS_STRING(args[6]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[6]);
    outbuf o = {NULL, 0, 0};
    Py_ssize_t pos = start, delivered = 0, scanned = 0, read_bytes = 0;
    unsigned long long last_pos = 0, last_pub = 0, last_seq = 0;
    int status = 0;
    while (1) {
        if (size - pos < 52) {
            status = 0;
            break;
        }
        const unsigned char *f = data + pos;
        uint32_t n = get_le32(f + 8);
        if (f[4] != 0xA7) {
            status = 3;
            break;
        }
        if ((uint64_t)(size - pos - 52) < n) {
            status = 0;
            break;
        }
        if (crc32_update(0, f + 4, (size_t)n + 48) != get_le32(f)) {
            status = 3;
            break;
        }
        if (f[5] != 1) {
            status = 3;
            break;
        }
        uint64_t position = get_le64(f + 12);
        unsigned char kind = f[6];
        Py_ssize_t total = 52 + (Py_ssize_t)n;
        if (position < next_pos) {
            pos += total;
            continue;
        }
        if (limit < 0 || position > (unsigned long long)limit) {
            status = 1;
            break;
        }
        if (kind >= 64) {
            pos += total;
            continue;
        }
        uint64_t pub = get_le64(f + 20), seq = get_le64(f + 28);
        replayed r;
        if (!read_replayed(f + 52, f + total, &r)) {
            status = 3;
            break;
        }
        if ((kind == 1 || kind == 2) && r.topic_len == name_len
                && memcmp(r.topic, name, (size_t)name_len) == 0
                && ((r.mt_len == mt_len && memcmp(r.mt, mt, (size_t)mt_len) == 0)
                    || (json && r.mt_len == 0))) {
            if ((r.corr != NULL && !all_ascii(r.corr, r.corr_len))
                    || (r.key != NULL && !all_ascii(r.key, r.key_len))) {
                status = 3;  /* (a JSON string of it is the general path's to write) */
                break;
            }
            {
                Py_ssize_t tail = 7 + 20 + 1 + 20 + 2 + 1;  /* ,"bm":"P|S|" } */
                if (r.corr != NULL)
                    tail += 5 + json_str_size(r.corr, r.corr_len);
                if (r.key != NULL)
                    tail += 5 + json_str_size(r.key, r.key_len);
                if (r.has_exp)
                    tail += 5 + 21;
                unsigned char *w = out_reserve(&o, 4 + head_len + tail + r.body_len);
                if (w == NULL) {
                    PyMem_Free(o.buf);
                    return NULL;
                }
                unsigned char *p = w + 4;
                memcpy(p, head, (size_t)head_len);
                p += head_len;
                memcpy(p, ",\"bm\":\"", 7);
                p = put_u64(p + 7, pub);
                *p++ = '|';
                p = put_u64(p, seq);
                *p++ = '|';
                *p++ = '"';
                if (r.corr != NULL) {
                    memcpy(p, ",\"x\":", 5);
                    p = put_json_str(p + 5, r.corr, r.corr_len);
                }
                if (r.key != NULL) {
                    memcpy(p, ",\"k\":", 5);
                    p = put_json_str(p + 5, r.key, r.key_len);
                }
                if (r.has_exp) {
                    memcpy(p, ",\"e\":", 5);
                    p += 5;
                    if (r.exp_neg) {
                        *p++ = '-';
                        p = put_u64(p, (uint64_t)0 - (uint64_t)r.exp_v);
                    } else {
                        p = put_u64(p, r.exp_u);
                    }
                }
                *p++ = '}';
                memcpy(p, r.body, (size_t)r.body_len);
                p += r.body_len;
                if ((uint64_t)(p - w - 4) > 0xFFFFFFFFu) {
                    status = 3;  /* (a frame over 4 GiB: never from a journal frame) */
                    break;
                }
                put_be32(w, (uint32_t)(p - w - 4));
                o.len = p - o.buf;
                delivered++;
            }
        }
        next_pos = position + 1;
        last_pos = position;
        last_pub = pub;
        last_seq = seq;
        scanned++;
        read_bytes += r.body_len;
        pos += total;
        if (delivered >= max_records || o.len >= max_bytes) {
            status = 2;
            break;
        }
    }
    PyObject *frames = PyBytes_FromStringAndSize((const char *)o.buf, o.len);
    PyMem_Free(o.buf);
    if (frames == NULL)
        return NULL;
    return Py_BuildValue("(nKKKKnNinn)", pos, next_pos, last_pos, last_pub, last_seq, delivered,
                         frames, status, scanned, read_bytes);
}

static PyMethodDef methods[] = {
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL,
     "Append one journal frame to a bytearray; return its size."},
    {"scan_frames", (PyCFunction)(void (*)(void))scan_frames, METH_FASTCALL,
     "Cut the complete AMPS frame payloads out of a read."},
    {"parse_publish_header", (PyCFunction)parse_publish_header, METH_O,
     "The parts of a plain publish header, or None (then parse it the general way)."},
    {"plain_run", (PyCFunction)(void (*)(void))plain_run, METH_FASTCALL,
     "The run of plain publishes to one topic at a start in a read's frames, or None."},
    {"crc32", (PyCFunction)(void (*)(void))crc32_py, METH_FASTCALL,
     "CRC-32 as zlib.crc32 computes it (the journal's frame and summary checks)."},
    {"frame_size", (PyCFunction)(void (*)(void))frame_size, METH_FASTCALL,
     "The size of a record's frame, from its payload fields, without encoding it."},
    {"sow_key", (PyCFunction)(void (*)(void))sow_key, METH_FASTCALL,
     "The SowKey of a one-field Key's value (an int or a str), or None (then keys.py's)."},
    {"sow_keyed", (PyCFunction)(void (*)(void))sow_keyed, METH_FASTCALL,
     "(doc, SowKey) of each document up to the first sow_key declines (then keys.py's)."},
    {"record_keys", (PyCFunction)(void (*)(void))record_keys, METH_FASTCALL,
     "record_keys(lk_of, keyed, seq) -> (LMDB keys, last seq): see sow.storage.lmdb_keys.record_keys_py"},
    {"int_run", (PyCFunction)(void (*)(void))int_run, METH_FASTCALL,
     "How many of a run's (document, SowKey) pairs have a whole-number field (see int_run_py)."},
    {"hash_int_rows", (PyCFunction)(void (*)(void))hash_int_rows, METH_FASTCALL,
     "The hash index rows of a run's int key fields (then sow/index.py's, one by one)."},
    {"bookmark_strs", (PyCFunction)bookmark_strs, METH_O,
     "The bookmark_str of each journal record of a list, or None (then journal/record.py's)."},
    {"sow_frames", (PyCFunction)(void (*)(void))sow_frames, METH_FASTCALL,
     "The sow frames of query results kept as stored SOW values (joined: as one bytes)."},
    {"sow_values", (PyCFunction)(void (*)(void))sow_values, METH_FASTCALL,
     "The stored SOW values of records without expiration or headers."},
    {"publish_run", (PyCFunction)(void (*)(void))publish_run, METH_FASTCALL,
     "The journal records of a run of plain publishes, and their frames appended."},
    {"replicated_run", (PyCFunction)(void (*)(void))replicated_run, METH_FASTCALL,
     "The journal records of a run of replicated publishes, and their frames appended."},
    {"frame_parts", (PyCFunction)(void (*)(void))frame_parts, METH_FASTCALL,
     "One frame whose header is head + sids + tail, then the body (a fan-out delivery)."},
    {"fan_send", (PyCFunction)(void (*)(void))fan_send, METH_FASTCALL,
     "Send each (send, sids) target its frame of a fan-out delivery; the bytes sent."},
    {"replay_frames", (PyCFunction)(void (*)(void))replay_frames, METH_FASTCALL,
     "The p frames a literal-topic replay delivers from journal frames as stored."},
    {"set_fallbacks", (PyCFunction)(void (*)(void))set_fallbacks, METH_FASTCALL,
     "Register the pure-Python append_record and frame_size that unusual arguments go to."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_speedups", "The compiled publish hot path (optional).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
#ifdef CRC_CLMUL
    __builtin_cpu_init();
    crc_clmul = __builtin_cpu_supports("pclmul") && !getenv("AMPS_EMULATOR_CRC_TABLE");
#endif
    PyObject *m = PyModule_Create(&module_def);
    if (m != NULL && PyModule_AddIntConstant(m, "crc_clmul", crc_clmul) < 0)
        Py_CLEAR(m);
    if (m != NULL && (PyType_Ready(&FillerType) < 0
                      || PyModule_AddObjectRef(m, "Filler", (PyObject *)&FillerType) < 0))
        Py_CLEAR(m);
#ifndef _WIN32
    if (m != NULL && (PyType_Ready(&SyncerType) < 0
                      || PyModule_AddObjectRef(m, "Syncer", (PyObject *)&SyncerType) < 0))
        Py_CLEAR(m);
#endif
    return m;
}
