/*
 * The floor of `make bench`: the least work a lock module command can do,
 * written against the redismodule.h of the server under test (module API of
 * Redis 7.0, so that one source loads on every server the bench runs).
 *
 *   FLOOR.LOCK key jid ttl   open the key; on an empty key (or one whose
 *                            holder's lease has ended, or the same jid) store
 *                            a one-holder value of a module type: the jid, its
 *                            absolute expiry and a fencing token (above every
 *                            earlier one, by the clock as the module's); set the key's
 *                            expiry; replicate the effect with the absolute
 *                            expiry and the token (FLOOR.APPLY, through
 *                            RM_Replicate's format); reply the token, or a null
 *                            when another jid holds.
 *   FLOOR.UNLOCK key jid     delete the key when jid holds it, replicate the
 *                            delete; reply 1, else 0.
 *   FLOOR.APPLY key jid at token   the effect, replayed (replicas, AOF).
 *
 * Nothing less than a lock needs (a module-type value, an exact effect), and
 * nothing more: no options, no metrics, no events, no waiters.
 */
#include <string.h>

#include "redismodule.h"

typedef struct {
    long long expires_at;
    long long token;
    size_t len;
    char jid[];
} Hold;

static RedisModuleType *HoldType;
static long long last_token;

static Hold *hold_new(const char *jid, size_t len) {
    Hold *h = RedisModule_Alloc(sizeof(Hold) + len);
    h->len = len;
    memcpy(h->jid, jid, len);
    return h;
}

static void hold_free(void *value) { RedisModule_Free(value); }

static void *hold_load(RedisModuleIO *io, int encver) {
    if (encver != 0) return NULL;
    size_t len;
    char *jid = RedisModule_LoadStringBuffer(io, &len);
    Hold *h = hold_new(jid, len);
    RedisModule_Free(jid);
    h->expires_at = RedisModule_LoadSigned(io);
    h->token = RedisModule_LoadSigned(io);
    if (h->token > last_token) last_token = h->token;
    return h;
}

static void hold_save(RedisModuleIO *io, void *value) {
    Hold *h = value;
    RedisModule_SaveStringBuffer(io, h->jid, h->len);
    RedisModule_SaveSigned(io, h->expires_at);
    RedisModule_SaveSigned(io, h->token);
}

static void hold_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    Hold *h = value;
    RedisModule_EmitAOF(io, "FLOOR.APPLY", "sbll", key, h->jid, h->len, h->expires_at, h->token);
}

static size_t hold_usage(const void *value) {
    const Hold *h = value;
    return sizeof(Hold) + h->len;
}

/* The Hold of an open key: NULL when empty; *wrong when of another type. */
static Hold *hold_of(RedisModuleKey *key, int *wrong) {
    *wrong = 0;
    int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) return NULL;
    if (type != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(key) != HoldType) {
        *wrong = 1;
        return NULL;
    }
    return RedisModule_ModuleTypeGetValue(key);
}

static int lock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    long long ttl;
    if (RedisModule_StringToLongLong(argv[3], &ttl) != REDISMODULE_OK || ttl <= 0)
        return RedisModule_ReplyWithError(ctx, "ERR invalid expire time in 'floor.lock' command");
    size_t len;
    const char *jid = RedisModule_StringPtrLen(argv[2], &len);
    long long now = RedisModule_Milliseconds();
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int wrong;
    Hold *h = hold_of(key, &wrong);
    if (wrong) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    if (h && (h->len != len || memcmp(h->jid, jid, len) != 0)) {
        if (h->expires_at > now) {
            RedisModule_CloseKey(key);
            return RedisModule_ReplyWithNull(ctx);
        }
        h = NULL; /* the lease ended: replaced below */
    }
    if (!h) {
        h = hold_new(jid, len);
        RedisModule_ModuleTypeSetValue(key, HoldType, h);
    }
    h->expires_at = now + ttl;
    /* A fencing token above every one issued before, across restarts that
     * lost the keys of earlier tokens and failovers that lost their last
     * grants: at least the clock in microseconds, as the spec asks (a
     * counter restored from the loaded values alone would not be). */
    last_token = last_token + 1 > now * 1000 ? last_token + 1 : now * 1000;
    h->token = last_token;
    RedisModule_SetAbsExpire(key, h->expires_at);
    RedisModule_CloseKey(key);
    RedisModule_Replicate(ctx, "FLOOR.APPLY", "sbll", argv[1], jid, len, h->expires_at, h->token);
    return RedisModule_ReplyWithLongLong(ctx, h->token);
}

static int unlock_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    size_t len;
    const char *jid = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int wrong;
    Hold *h = hold_of(key, &wrong);
    if (wrong) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    if (!h || h->len != len || memcmp(h->jid, jid, len) != 0) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithLongLong(ctx, 0);
    }
    RedisModule_DeleteKey(key);
    RedisModule_CloseKey(key);
    RedisModule_Replicate(ctx, "DEL", "s", argv[1]);
    return RedisModule_ReplyWithLongLong(ctx, 1);
}

static int apply_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 5) return RedisModule_WrongArity(ctx);
    long long at, token;
    if (RedisModule_StringToLongLong(argv[3], &at) != REDISMODULE_OK ||
        RedisModule_StringToLongLong(argv[4], &token) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR value is not an integer or out of range");
    size_t len;
    const char *jid = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int wrong;
    hold_of(key, &wrong);
    if (wrong) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    Hold *h = hold_new(jid, len);
    h->expires_at = at;
    h->token = token;
    if (token > last_token) last_token = token;
    RedisModule_ModuleTypeSetValue(key, HoldType, h);
    RedisModule_SetAbsExpire(key, at);
    RedisModule_CloseKey(key);
    RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithLongLong(ctx, token);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "floor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    RedisModuleTypeMethods methods = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = hold_load,
        .rdb_save = hold_save,
        .aof_rewrite = hold_rewrite,
        .mem_usage = hold_usage,
        .free = hold_free,
    };
    HoldType = RedisModule_CreateDataType(ctx, "floorhold", 0, &methods);
    if (HoldType == NULL) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.lock", lock_command, "write deny-oom fast", 1, 1, 1) ==
            REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.unlock", unlock_command, "write fast", 1, 1, 1) ==
            REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.apply", apply_command, "write deny-oom fast", 1, 1, 1) ==
            REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
