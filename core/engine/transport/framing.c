/* framing.c - names of the framings and the sentences that tell a user the
 * peer speaks another one, shared by the transports (which meet the peer's
 * frames) and the engine (which meets its bytes on the bootstrap socket). */
#include <stdio.h>

#include "engine/transport/framing.h"

int wire_of_framing(int framing)
{
    switch (framing) {
    case TBRT_FRAMING_LLAMA_APPLE: return WIRE_LLAMA_APPLE;
    case TBRT_FRAMING_LLAMA_LINUX: return WIRE_LLAMA_LINUX;
    default: return WIRE_TBRT;
    }
}

const char *framing_name(int framing)
{
    switch (framing) {
    case TBRT_FRAMING_AUTO: return "auto";
    case TBRT_FRAMING_FIXED: return "fixed";
    case TBRT_FRAMING_VARIABLE: return "variable";
    case TBRT_FRAMING_LLAMA_APPLE: return "llama-apple";
    case TBRT_FRAMING_LLAMA_LINUX: return "llama-linux";
    default: return "?";
    }
}

static const struct {
    const char *name, *what;
    uint8_t notice;
} wires[] = {
    [WIRE_TBRT] = {"tbrt", "16-byte TBRT header, readiness and goodbye bytes", 'T'},
    [WIRE_LLAMA_APPLE] = {"llama-apple", "8-byte RSEG header", 'A'},
    [WIRE_LLAMA_LINUX] = {"llama-linux", "no frame header: plain SENDs of up to 256 KiB", 'L'},
};

void wire_mismatch(char *buf, size_t len, const char *what, int mine, int peer)
{
    if (peer < WIRE_TBRT || peer > WIRE_LLAMA_LINUX)
        peer = WIRE_TBRT;
    if (mine < WIRE_TBRT || mine > WIRE_LLAMA_LINUX)
        mine = WIRE_TBRT;
    snprintf(buf, len, "%s: peer speaks %s framing (%s); open the link with framing = '%s' "
             "(this link speaks %s framing)", what, wires[peer].name, wires[peer].what,
             wires[peer].name, wires[mine].name);
}

uint8_t wire_notice_byte(int kind)
{
    return kind >= WIRE_TBRT && kind <= WIRE_LLAMA_LINUX ? wires[kind].notice : 0;
}

int wire_of_notice(uint8_t b)
{
    for (int k = WIRE_TBRT; k <= WIRE_LLAMA_LINUX; k++)
        if (wires[k].notice == b)
            return k;
    return WIRE_NONE;
}
