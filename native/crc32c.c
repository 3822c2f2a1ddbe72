/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), zlib.crc32-style API.
 *
 * #include-d into the wrapper cffi generates for ensemble._native_crc32c
 * (declared in native/modules.py); used by fusee/crc32c.py, which keeps a
 * pure-Python fallback giving the same checksums.
 *
 *   crc32c_update(value, buf, len)  the running CRC after buf, given the
 *                                   running CRC before it (0 to start):
 *                                   chains like zlib.crc32(data, value)
 *   crc32c_hw()                     1 if the SSE4.2 crc32 instruction is used
 *   crc32c_portable(value, buf, len) crc32c_update by the table, always
 *                                   (for the tests, where SSE4.2 is used)
 *
 * On x86 the SSE4.2 path is chosen at run time (__builtin_cpu_supports), and
 * its function is compiled with __attribute__((target("sse4.2"))), so the
 * build needs no -msse4.2.  Elsewhere, or on a CPU without SSE4.2, a portable
 * slicing-by-8 table does the work.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[8][256];
static int crc32c_ready;     /* tables built, CPU probed */
static int crc32c_use_hw;    /* 1: SSE4.2 path */

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CRC32C_X86 1
#include <nmmintrin.h>

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n)
{
    /* byte steps up to an 8-byte boundary, then 8 (or 4) bytes at a time */
    while (n && ((uintptr_t)p & 7)) {
        crc = _mm_crc32_u8(crc, *p++);
        n--;
    }
#if defined(__x86_64__)
    {
        uint64_t c = crc;
        while (n >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            c = _mm_crc32_u64(c, w);
            p += 8;
            n -= 8;
        }
        crc = (uint32_t)c;
    }
#else
    while (n >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        crc = _mm_crc32_u32(crc, w);
        p += 4;
        n -= 4;
    }
#endif
    while (n--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}
#endif

static void crc32c_init(void)
{
    uint32_t i, k, c;
    if (crc32c_ready)
        return;
    for (i = 0; i < 256; i++) {
        c = i;
        for (k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[0][i] = c;
    }
    for (i = 0; i < 256; i++) {
        c = crc32c_table[0][i];
        for (k = 1; k < 8; k++) {
            c = crc32c_table[0][c & 0xff] ^ (c >> 8);
            crc32c_table[k][i] = c;
        }
    }
#if defined(CRC32C_X86)
    __builtin_cpu_init();
    crc32c_use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    crc32c_ready = 1;
}

#if defined(__GNUC__)
/* Run once when the .so is loaded (under Python's import lock), so that the
 * calls, which cffi makes with the GIL released, never race on the tables. */
__attribute__((constructor)) static void crc32c_ctor(void) { crc32c_init(); }
#endif

static uint32_t crc32c_sw(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        /* little-endian assembly of the 8 bytes, whatever the host order */
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                             (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 |
                      (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
              crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^
              crc32c_table[3][hi & 0xff] ^ crc32c_table[2][(hi >> 8) & 0xff] ^
              crc32c_table[1][(hi >> 16) & 0xff] ^ crc32c_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static uint32_t crc32c_update(uint32_t value, const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t crc = ~value;
    if (!crc32c_ready)
        crc32c_init();   /* only without the constructor (non-GNU compilers) */
#if defined(CRC32C_X86)
    if (crc32c_use_hw)
        return ~crc32c_sse42(crc, p, len);
#endif
    return ~crc32c_sw(crc, p, len);
}

/* The portable path even where SSE4.2 is used, so the tests can check it. */
static uint32_t crc32c_portable(uint32_t value, const char *buf, size_t len)
{
    if (!crc32c_ready)
        crc32c_init();
    return ~crc32c_sw(~value, (const unsigned char *)buf, len);
}

static int crc32c_hw(void)
{
    if (!crc32c_ready)
        crc32c_init();
    return crc32c_use_hw;
}

/* The checksums of a run of journal frames laid out in buf (fusee/segment.py):
 * each frame is len:u32le crc:u32le lsn:u64le batch:u32le (20 bytes) then len bytes of
 * body, and its crc covers the 12 bytes of lsn and batch then the body.
 * Writes each frame's crc in place, in one call for the whole flush batch (a
 * call per frame gave the GIL up once per record).  Returns the number of
 * frames filled, or -1 (nothing more written) if a frame's length runs past
 * size: the caller built the buffer, so that is a bug, not bad data. */
static long crc32c_fill_frames(char *buf, size_t size)
{
    unsigned char *p = (unsigned char *)buf;
    size_t off = 0;
    long n = 0;
    while (off + 20 <= size) {
        uint32_t len = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 |
                       (uint32_t)p[off + 2] << 16 | (uint32_t)p[off + 3] << 24;
        uint32_t crc;
        if (len > size - off - 20)
            return -1;
        crc = crc32c_update(0, (const char *)p + off + 8, 12 + (size_t)len);
        p[off + 4] = (unsigned char)crc;
        p[off + 5] = (unsigned char)(crc >> 8);
        p[off + 6] = (unsigned char)(crc >> 16);
        p[off + 7] = (unsigned char)(crc >> 24);
        off += 20 + (size_t)len;
        n++;
    }
    return off == size ? n : -1;
}
