/* udp_crc_check.c - build/test/udp-crc: the UDP wire's CRC-32 ways
 * (core/soft/wire/udp/udp_crc.c), each this CPU has, against the tables,
 * for spec/udp_crc_spec.lua (the ways are internal: libtbrt.a, not the
 * shared library's API).
 *
 * Prints "used WAY", then per way "WAY check 0xcbf43926 mismatches N" (the
 * standard check value of "123456789", and how many of the lengths
 * 0..2100 at four alignments and three start registers differ from the
 * tables), or "WAY absent". */
#include <stdio.h>
#include <string.h>

#include "soft/wire/udp/udp.h"

static const char *const names[UDP_CRC_WAYS] = {"table", "pclmul", "vpclmul"};

int main(void)
{
    static uint8_t buf[2200 + 64];
    uint32_t x = 7;
    for (size_t i = 0; i < sizeof buf; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    printf("used %s\n", udp_crc_way());
    for (int way = 0; way < UDP_CRC_WAYS; way++) {
        uint32_t check;
        if (udp_crc32_by(way, 0xffffffffu, "123456789", 9, &check) != 0) {
            printf("%s absent\n", names[way]);
            continue;
        }
        unsigned bad = 0;
        static const size_t aligns[] = {0, 1, 8, 13};
        for (size_t a = 0; a < 4; a++)
            for (size_t n = 0; n <= 2100; n++)
                for (int s = 0; s < 3; s++) {
                    uint32_t start = s == 0 ? 0xffffffffu : s == 1 ? 0 : (uint32_t)(n * 2654435761u);
                    uint32_t want, got;
                    udp_crc32_by(UDP_CRC_TABLE, start, buf + aligns[a], n, &want);
                    udp_crc32_by(way, start, buf + aligns[a], n, &got);
                    bad += want != got;
                }
        printf("%s check 0x%08x mismatches %u\n", names[way], ~check, bad);
    }
    /* what the wire calls is the way it says it uses */
    uint32_t used = udp_crc32(0xffffffffu, buf, 2200), table;
    udp_crc32_by(UDP_CRC_TABLE, 0xffffffffu, buf, 2200, &table);
    printf("udp_crc32 %s\n", used == table ? "agrees" : "differs");
    return 0;
}
