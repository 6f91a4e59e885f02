//! Command info and configuration: RM_GetCommand + RM_SetCommandInfo from the
//! plain data of `docs`, so that COMMAND DOCS, COMMAND INFO and cluster routing
//! know each command; and RM_LoadConfigs for the load of the `unique.*`
//! settings (`load_config` in lib.rs).

use std::ffi::{CString, c_char, c_int};
use std::ptr::{null, null_mut};

use redis_module::{Context, raw};

use crate::docs::{Arg, ArgType, CommandDoc, KeyFlag, KeySpec};

/// The C strings and arrays a `RedisModuleCommandInfo` points into. Redis
/// copies all of it in RM_SetCommandInfo, so this lives only for the call;
/// moving a `CString` or a `Vec` into it leaves their heap buffers (what
/// the pointers point at) in place.
#[derive(Default)]
struct Arena {
    strings: Vec<CString>,
    args: Vec<Vec<raw::RedisModuleCommandArg>>,
    specs: Vec<Vec<raw::RedisModuleCommandKeySpec>>,
}

impl Arena {
    fn str(&mut self, s: &str) -> Result<*const c_char, String> {
        let c = CString::new(s).map_err(|_| format!("a NUL byte in {s:?}"))?;
        let p = c.as_ptr();
        self.strings.push(c);
        Ok(p)
    }

    fn opt_str(&mut self, s: Option<&str>) -> Result<*const c_char, String> {
        s.map_or(Ok(null()), |s| self.str(s))
    }

    /// A NULL-name-terminated array of `args`.
    fn args(&mut self, args: &[Arg]) -> Result<*mut raw::RedisModuleCommandArg, String> {
        if args.is_empty() {
            return Ok(null_mut());
        }
        let mut out = Vec::with_capacity(args.len() + 1);
        for arg in args {
            let (type_, key_spec_index) = match arg.kind {
                ArgType::Key(i) => (raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY, i),
                ArgType::String => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                    -1,
                ),
                ArgType::Integer => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                    -1,
                ),
                ArgType::UnixTime => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
                    -1,
                ),
                ArgType::PureToken => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
                    -1,
                ),
                ArgType::OneOf => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                    -1,
                ),
                ArgType::Block => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
                    -1,
                ),
            };
            let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
            if arg.optional {
                flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
            }
            if arg.multiple {
                flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
            }
            out.push(raw::RedisModuleCommandArg {
                name: self.str(arg.name)?,
                type_,
                key_spec_index,
                token: self.opt_str(arg.token)?,
                summary: self.opt_str(Some(arg.summary).filter(|s| !s.is_empty()))?,
                since: null(),
                flags: flags as c_int,
                deprecated_since: null(),
                subargs: self.args(arg.subargs)?,
                // Read from Redis 7.2 on (the placeholder in redis-cli's
                // hints); 7.0 steps over it (sizeof_arg below).
                display_text: self.opt_str(arg.display)?,
            });
        }
        out.push(raw::RedisModuleCommandArg {
            name: null(),
            type_: 0,
            key_spec_index: 0,
            token: null(),
            summary: null(),
            since: null(),
            flags: 0,
            deprecated_since: null(),
            subargs: null_mut(),
            display_text: null(),
        });
        let p = out.as_mut_ptr();
        self.args.push(out);
        Ok(p)
    }

    /// A terminated array of key specs, NULL for none: one key at its
    /// index, or the keys after their count (numkeys first, as EVAL's).
    fn specs(&mut self, specs: &[KeySpec]) -> *mut raw::RedisModuleCommandKeySpec {
        if specs.is_empty() {
            return null_mut();
        }
        let spec = |begin, pos, flags| raw::RedisModuleCommandKeySpec {
            notes: null(),
            flags,
            begin_search_type: begin,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos },
            },
            find_keys_type: if begin == 0 {
                0
            } else {
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE
            },
            fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                // One key: the last is the first, step 1, no limit.
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: if begin == 0 { 0 } else { 1 },
                    limit: 0,
                },
            },
        };
        let mut out: Vec<_> = specs
            .iter()
            .map(|s| {
                let flags = s.flags.iter().fold(0u64, |acc, f| {
                    acc | u64::from(match f {
                        KeyFlag::Ro => raw::REDISMODULE_CMD_KEY_RO,
                        KeyFlag::Rw => raw::REDISMODULE_CMD_KEY_RW,
                        KeyFlag::Access => raw::REDISMODULE_CMD_KEY_ACCESS,
                        KeyFlag::Update => raw::REDISMODULE_CMD_KEY_UPDATE,
                        KeyFlag::Delete => raw::REDISMODULE_CMD_KEY_DELETE,
                    })
                });
                let mut one = spec(
                    raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
                    s.index,
                    flags,
                );
                if s.counted {
                    // The count is where the search begins (0 from there),
                    // the first key right after it, then every argument.
                    one.find_keys_type =
                        raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
                    one.fk = raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                        keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                            keynumidx: 0,
                            firstkey: 1,
                            keystep: 1,
                        },
                    };
                }
                one
            })
            .collect();
        // begin_search_type 0 (INVALID) ends the array.
        out.push(spec(0, 0, 0));
        let p = out.as_mut_ptr();
        self.specs.push(out);
        p
    }
}

/// Gives `cmd`, a command this module registered, its docs, arity and
/// key specs. Only during the module's load (RM_OnLoad).
pub fn describe(ctx: &Context, cmd: &CommandDoc) -> Result<(), String> {
    let mut arena = Arena::default();
    let name = arena.str(cmd.name)?;
    // SAFETY: `ctx` is the load context; `name` is a NUL-terminated
    // string that outlives the call. A NULL reply means not ours.
    let command = unsafe { raw::RedisModule_GetCommand.map(|f| f(ctx.get_raw(), name)) }
        .filter(|c| !c.is_null())
        .ok_or("RM_GetCommand found no such command of this module")?;
    // What Redis reads the arrays with: the sizes of this module's
    // structs (version 1 of the API, as in Redis 7.0's header).
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: arena.str(cmd.summary)?,
        complexity: arena.str(cmd.complexity)?,
        since: arena.str(cmd.since)?,
        history: null_mut(),
        tips: arena.opt_str(Some(cmd.tips).filter(|t| !t.is_empty()))?,
        arity: cmd.arity,
        key_specs: arena.specs(cmd.key_specs),
        args: arena.args(cmd.args)?,
    };
    // SAFETY: `command` is this module's command; `info` and everything
    // it points to (`version`, `arena`) are alive and well-formed for
    // the call: every array ends with its terminator, every string with
    // NUL. Redis validates the info, copies what it keeps and retains no
    // pointer into it.
    let status = unsafe {
        raw::RedisModule_SetCommandInfo.map_or(raw::REDISMODULE_ERR as c_int, |f| f(command, &info))
    };
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err("RM_SetCommandInfo refused the info (see the line above)".into())
    }
}

/// Registers the docs of every public command (`docs`: those of the
/// registered commands). A refusal is logged and leaves that command as it
/// was (arity -1, its registration key range): the module still loads.
pub fn describe_commands<'a>(ctx: &Context, docs: impl Iterator<Item = &'a CommandDoc>) {
    for cmd in docs {
        if let Err(e) = describe(ctx, cmd) {
            ctx.log_warning(&format!("no command docs for {}: {e}", cmd.name));
        }
    }
}

/// Applies the configuration that redis.conf, the command line or MODULE
/// LOADEX gave for the registered `unique.*` settings (or their defaults).
/// False when Redis refused a value (it logs which).
pub fn load_configs(ctx: &Context) -> bool {
    // SAFETY: `ctx` is the load context, after every config was registered.
    let status = unsafe { raw::RedisModule_LoadConfigs.map(|f| f(ctx.get_raw())) };
    status == Some(raw::REDISMODULE_OK as i32)
}

/// Whether the server has the module configuration API (Redis 7.0+).
pub fn has_module_configs() -> bool {
    // SAFETY: reads function pointers that RedisModule_Init set during the
    // load, before any other module code runs.
    unsafe {
        let register = raw::RedisModule_RegisterNumericConfig;
        let load = raw::RedisModule_LoadConfigs;
        register.is_some() && load.is_some()
    }
}
