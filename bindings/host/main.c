/* main.c - the tbrt program: LuaJIT and luv sharing libuv's default loop.
 *
 * The C side only builds the Lua state: it opens the standard libraries,
 * hands luv the default loop (so require("luv") everywhere, and the core's
 * fds watched through it, all live on one loop), routes errors raised in
 * luv callbacks to a Lua hook, sets the module paths from where the
 * executable lives, and calls tbrt.main with the command line. Everything
 * else (options, running the script as a task, running the loop, exit
 * codes) is policy and lives in lua/tbrt/main.lua.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <luv/luv.h>

/* Registry key of the Lua function that reports an error raised in a luv
 * callback (tbrt.main sets it). It gets the message with its traceback;
 * if it returns, the loop goes on. Without it the host reports and exits. */
#define CALLBACK_ERROR_HOOK "tbrt.callback_error"

/* Exit code for an uncaught error, as luajit uses. */
#define EXIT_ERROR 1

int luaopen_tbrt_fdpoll(lua_State *L); /* fdpoll.c */

/* Error handler for lua_pcall: the message (or a description of a
 * non-string error object) followed by the traceback of where it was
 * raised. */
static int host_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static void report(const char *what, const char *msg)
{
    fflush(stdout);
    fprintf(stderr, "tbrt: %s%s\n", what, msg ? msg : "(no message)");
    fflush(stderr);
}

/* luv calls this for every callback (luv_CFpcall: function and nargs on
 * the stack; returns the number of results, or minus the lua_pcall code).
 * An error never vanishes: it goes to the Lua hook, or is reported here and
 * ends the process (unless luv asked us not to exit). */
static int host_callback_pcall(lua_State *L, int nargs, int nresults, int flags)
{
    int handler = lua_gettop(L) - nargs; /* where the function is now */
    lua_pushcfunction(L, host_traceback);
    lua_insert(L, handler);
    int rc = lua_pcall(L, nargs, nresults, handler);
    if (rc == 0) {
        int n = lua_gettop(L) - handler;
        lua_remove(L, handler);
        return n;
    }
    lua_getfield(L, LUA_REGISTRYINDEX, CALLBACK_ERROR_HOOK);
    if (lua_isfunction(L, -1)) {
        lua_pushvalue(L, -2);
        if (lua_pcall(L, 1, 0, 0) == 0) {
            lua_pop(L, 2); /* message, handler */
            return -rc;
        }
        report("the callback error hook failed: ", lua_tostring(L, -1));
    }
    report("", lua_tostring(L, -2));
    if (!(flags & LUVF_CALLBACK_NOEXIT))
        exit(EXIT_ERROR);
    lua_settop(L, handler - 1);
    return -rc;
}

/* A caught SIGPIPE makes writes to a closed pipe or socket fail with EPIPE,
 * as SIG_IGN would, but unlike SIG_IGN it is reset by exec, so programs we
 * start (io.popen, uv.spawn) get the default behaviour back. */
static void on_sigpipe(int sig)
{
    (void)sig;
}

static int install_sigpipe(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigpipe;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return sigaction(SIGPIPE, &sa, NULL);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Where the program runs from:
 *   build tree  ROOT/build*\/tbrt with ROOT/lua/tbrt/main.lua
 *   installed   PREFIX/bin/tbrt with PREFIX/share/tbrt/lua/tbrt/main.lua
 * Sets package.path for that layout (in front of the default, which keeps
 * LUA_PATH), TBRT_BUILD for the build tree (the bindings load libtbrt.so
 * from it; child tbrt processes inherit it), and package.loaded["tbrt.host"]
 * = { exe, exe_dir, layout, root | prefix }. */
static void set_paths(lua_State *L)
{
    char exe[PATH_MAX], dir[PATH_MAX], top[PATH_MAX], probe[PATH_MAX + 64];
    const char *layout = "unknown";

    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return; /* no /proc: only the default path; require will say what it tried */
    exe[n] = '\0';
    snprintf(dir, sizeof dir, "%s", exe);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return;
    *slash = '\0';
    const char *dir_name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    snprintf(top, sizeof top, "%s", dir);
    slash = strrchr(top, '/');
    if (slash == top)
        top[1] = '\0'; /* the executable's directory is in / */
    else if (slash != NULL)
        *slash = '\0';

    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    const char *old_path = lua_tostring(L, -1);

    snprintf(probe, sizeof probe, "%s/lua/tbrt/main.lua", top);
    if (strncmp(dir_name, "build", 5) == 0 && is_file(probe)) {
        layout = "build";
        lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s/bindings/?.lua;%s/gen/?.lua;%s",
            top, top, top, dir, old_path);
        lua_setfield(L, -3, "path");
        setenv("TBRT_BUILD", dir, 0);
    } else {
        snprintf(probe, sizeof probe, "%s/share/tbrt/lua/tbrt", top);
        if (strcmp(dir_name, "bin") == 0 && is_dir(probe)) {
            layout = "installed";
            lua_pushfstring(L, "%s/share/tbrt/lua/?.lua;%s/share/tbrt/lua/?/init.lua;%s",
                top, top, old_path);
            lua_setfield(L, -3, "path");
        }
    }
    lua_pop(L, 1); /* old path */

    lua_getfield(L, -1, "loaded");
    lua_createtable(L, 0, 4);
    lua_pushstring(L, exe);
    lua_setfield(L, -2, "exe");
    lua_pushstring(L, dir);
    lua_setfield(L, -2, "exe_dir");
    lua_pushstring(L, layout);
    lua_setfield(L, -2, "layout");
    if (strcmp(layout, "unknown") != 0) {
        lua_pushstring(L, top);
        lua_setfield(L, -2, strcmp(layout, "build") == 0 ? "root" : "prefix");
    }
    lua_setfield(L, -2, "tbrt.host");
    lua_pop(L, 2); /* loaded, package */
}

/* package.loaded.luv = luv bound to the default loop, before anyone can
 * require it (luv would otherwise make a loop of its own). */
static int open_luv(lua_State *L)
{
    luv_set_loop(L, uv_default_loop());
    luv_set_callback(L, host_callback_pcall);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lua_pushcfunction(L, luaopen_luv);
    lua_call(L, 0, 1);
    lua_setfield(L, -2, "luv");
    lua_pop(L, 1);
    /* fd readiness without luv's stderr noise on POLLERR (fdpoll.c) */
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, luaopen_tbrt_fdpoll);
    lua_setfield(L, -2, "tbrt.fdpoll");
    lua_pop(L, 2);
    return 0;
}

/* require("tbrt.main").main(argv) -> exit code. argv keeps C's numbering:
 * argv[0] is the program, argv.n the last index. */
static int run_main(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = (char **)lua_touserdata(L, 2);
    lua_getglobal(L, "require");
    lua_pushstring(L, "tbrt.main");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "main");
    lua_createtable(L, argc, 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_pushinteger(L, argc - 1);
    lua_setfield(L, -2, "n");
    lua_call(L, 1, 1);
    return 1;
}

/* Under AddressSanitizer the Lua heap comes from malloc, so the sanitizer
 * sees it: a stray write from C into memory Lua freed (a registered buffer
 * a peer still writes, a stale view) is then reported where it happens
 * instead of corrupting LuaJIT's own allocator and crashing later, far
 * from the cause. Other builds keep LuaJIT's faster allocator. */
#if defined(__SANITIZE_ADDRESS__)
static void *host_alloc(void *ud, void *p, size_t old, size_t n)
{
    (void)ud;
    (void)old;
    if (n == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, n);
}
#define HOST_NEWSTATE() lua_newstate(host_alloc, NULL)
#else
#define HOST_NEWSTATE() luaL_newstate()
#endif

int main(int argc, char **argv)
{
    if (install_sigpipe() != 0)
        perror("tbrt: sigaction(SIGPIPE)");

    lua_State *L = HOST_NEWSTATE();
    if (L == NULL) {
        report("", "cannot create the Lua state (out of memory)");
        return EXIT_ERROR;
    }
    luaL_openlibs(L);
    set_paths(L);

    int code = EXIT_ERROR;
    lua_pushcfunction(L, host_traceback);
    int handler = lua_gettop(L);
    lua_pushcfunction(L, open_luv);
    if (lua_pcall(L, 0, 0, handler) != 0) {
        report("cannot open luv: ", lua_tostring(L, -1));
        lua_close(L);
        return EXIT_ERROR;
    }
    lua_pushcfunction(L, run_main);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    if (lua_pcall(L, 2, 1, handler) != 0)
        report("", lua_tostring(L, -1));
    else if (lua_isnumber(L, -1))
        code = (int)lua_tointeger(L, -1);
    else
        code = 0;

    /* tbrt.main closed every handle and ran the loop dry; closing the state
     * runs the remaining finalizers (ffi.gc on core objects) in order. */
    fflush(stdout);
    lua_close(L);
    (void)uv_loop_close(uv_default_loop());
    return code;
}
