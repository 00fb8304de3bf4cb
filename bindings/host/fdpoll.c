/* fdpoll.c - the tbrt.fdpoll module: readiness of a raw fd on the shared
 * loop (a uv_poll handle), for task.poll.
 *
 * luv has uv.new_poll, but its callback prints "EBADF: bad file descriptor"
 * to stderr whenever libuv reports POLLERR - which is what a socket whose
 * peer died looks like. A dead peer is an expected event here (the
 * bootstrap socket is the liveness anchor), so this module reports the error
 * to the Lua callback and nowhere else. Callbacks run through luv's
 * protected call (the host's), so their errors are routed like any other.
 *
 *   local h = fdpoll.new(fd)
 *   h:start("r" | "w" | "rw", function(err, events) ... end)
 *   h:stop() ; h:close() ; h:is_closing()
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <luv/lhandle.h>
#include <luv/luv.h>

#define FDPOLL_MT "tbrt.fdpoll"

struct fdpoll {
    /* first: what luv expects in handle->data, so uv.walk (which visits
     * every handle on the loop) finds this handle's userdata and can call
     * its close / is_closing like a luv handle's */
    luv_handle_t luv;
    uv_poll_t handle;
    lua_State *L;
    int self_ref;   /* keeps the userdata alive while the handle is open */
    int cb_ref;
    int closing;
};

struct fdpoll_box {
    struct fdpoll *p;
};

static struct fdpoll *check(lua_State *L)
{
    struct fdpoll_box *b = luaL_checkudata(L, 1, FDPOLL_MT);
    if (!b->p || b->p->closing)
        luaL_error(L, "fdpoll: handle is closed");
    return b->p;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct fdpoll *p = h->data;
    lua_State *L = p->L;
    if (p->cb_ref == LUA_NOREF)
        return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, p->cb_ref);
    if (status < 0)
        lua_pushfstring(L, "%s: %s", uv_err_name(status), uv_strerror(status));
    else
        lua_pushnil(L);
    const char *ev = (events & UV_READABLE) && (events & UV_WRITABLE) ? "rw"
                     : (events & UV_READABLE)                        ? "r"
                     : (events & UV_WRITABLE)                        ? "w"
                                                                      : "";
    lua_pushstring(L, ev);
    luv_context(L)->cb_pcall(L, 2, 0, 0);
}

static int l_new(lua_State *L)
{
    int fd = (int)luaL_checkinteger(L, 1);
    struct fdpoll *p = calloc(1, sizeof *p);
    if (!p)
        return luaL_error(L, "fdpoll: out of memory");
    int rc = uv_poll_init(luv_loop(L), &p->handle, fd);
    if (rc < 0) {
        free(p);
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s (fd %d)", uv_err_name(rc), uv_strerror(rc), fd);
        return 2;
    }
    p->handle.data = p;
    p->L = luv_state(L);
    p->cb_ref = LUA_NOREF;
    struct fdpoll_box *b = lua_newuserdata(L, sizeof *b);
    b->p = p;
    luaL_getmetatable(L, FDPOLL_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    p->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    p->luv.ref = p->self_ref;
    p->luv.callbacks[0] = p->luv.callbacks[1] = LUA_NOREF;
    p->luv.ctx = luv_context(L);
    p->handle.data = p;
    return 1;
}

static int l_start(lua_State *L)
{
    struct fdpoll *p = check(L);
    const char *ev = luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    int events = (strchr(ev, 'r') ? UV_READABLE : 0) | (strchr(ev, 'w') ? UV_WRITABLE : 0);
    if (!events)
        return luaL_error(L, "fdpoll:start: events must be r, w or rw");
    luaL_unref(L, LUA_REGISTRYINDEX, p->cb_ref);
    lua_pushvalue(L, 3);
    p->cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    int rc = uv_poll_start(&p->handle, events, on_poll);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", uv_err_name(rc), uv_strerror(rc));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int l_stop(lua_State *L)
{
    struct fdpoll *p = check(L);
    uv_poll_stop(&p->handle);
    lua_pushboolean(L, 1);
    return 1;
}

static void on_close(uv_handle_t *h)
{
    struct fdpoll *p = h->data;
    /* like luv, keep the userdata alive until the handle is really closed */
    luaL_unref(p->L, LUA_REGISTRYINDEX, p->self_ref);
    free(p);
}

static int l_close(lua_State *L)
{
    struct fdpoll_box *b = luaL_checkudata(L, 1, FDPOLL_MT);
    struct fdpoll *p = b->p;
    if (!p || p->closing)
        return 0;
    p->closing = 1;
    luaL_unref(L, LUA_REGISTRYINDEX, p->cb_ref);
    p->cb_ref = LUA_NOREF;
    b->p = NULL;                /* the box forgets it; on_close frees it */
    uv_close((uv_handle_t *)&p->handle, on_close);
    return 0;
}

static int l_is_closing(lua_State *L)
{
    struct fdpoll_box *b = luaL_checkudata(L, 1, FDPOLL_MT);
    lua_pushboolean(L, !b->p || b->p->closing);
    return 1;
}

/* The userdata goes when its handle has closed (on_close frees it). */
static int l_gc(lua_State *L)
{
    struct fdpoll_box *b = luaL_checkudata(L, 1, FDPOLL_MT);
    b->p = NULL;
    return 0;
}

int luaopen_tbrt_fdpoll(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"start", l_start}, {"stop", l_stop}, {"close", l_close},
        {"is_closing", l_is_closing}, {NULL, NULL},
    };
    if (luaL_newmetatable(L, FDPOLL_MT)) {
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__gc");
        lua_newtable(L);
        luaL_register(L, NULL, methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_new);
    lua_setfield(L, -2, "new");
    return 1;
}
