# frozen_string_literal: true

# Jobs of the tests of what sidekiq-unique-jobs v9 users rely on (test/v9_*_test.rb,
# test/sidekiq_api_delete_test.rb): loaded by the tests and by the Sidekiq processes.

# after_unlock as an instance method (called after perform here: until_executed).
class AfterUnlockJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, retry: 3

  def perform(token, opts = {})
    @token = token
    TestJobs.run(self, token, opts)
  end

  def after_unlock
    TestJobs.record(@token, "after_unlock", self)
  end
end

# after_unlock as a class method that takes the job hash: records an "after_unlock" event
# with whether the lock named in the args ("key") was already free; raises when asked to
# (the job must neither fail nor run again: its lock is already free). The lock type
# comes with the job (`.set(lock: ...)`).
class AfterUnlockClassJob
  include TestJobs::JOB
  sidekiq_options lock: :while_executing, lock_args_method: ->(args) { [args.first] }, retry: 3
  sidekiq_retry_in { |_count, _ex| 1 }

  def self.after_unlock(item)
    opts = item["args"][1] || {}
    held = opts["key"] ? TestJobs.conn.call("UNIQUE.LOCKEDBY", opts["key"]).include?(item["jid"]) : nil
    TestJobs.conn.call("RPUSH", "events:#{item["args"][0]}",
                       JSON.generate("event" => "after_unlock", "jid" => item["jid"], "held" => held))
    raise "after_unlock failing on purpose" if opts["raise"]
  end

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# A class lock_ttl that a job's own lock_ttl overrides.
class TtlJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, lock_ttl: 7200, retry: 3

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# A lock_ttl that is neither a number nor a Proc: anything with #to_i (a Duration, say).
class TtlOnlyToI
  def to_i
    30
  end
end

class TtlObjectJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, lock_ttl: TtlOnlyToI.new, retry: 3

  def perform(token, opts = {})
    TestJobs.run(self, token, opts)
  end
end

# Option names of older sidekiq-unique-jobs versions.
class LegacyUniqueJob
  include TestJobs::JOB
  sidekiq_options unique: :until_executed

  def perform(token)
    TestJobs.record(token, "done", self)
  end
end

class LegacyUniquePrefixJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, unique_prefix: "old"

  def perform(token); end
end

class LegacyLockArgsOptionJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, lock_args: ->(args) { [args.first] }

  def perform(token, _stamp); end
end

class UniqueArgsOptionJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, unique_args: ->(args) { [args.first] }

  def perform(token, _stamp); end
end

class UniqueArgsMethodJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed

  def self.unique_args(args)
    [args.first]
  end

  def perform(token, _stamp); end
end

class LockExpirationJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, lock_expiration: 20

  def perform(token); end
end

# Locks freed when Sidekiq's API deletes a job: dependency locks too.
class DependentDeleteJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, dependency_locks: ->(args) { ["dep:#{args[0]}"] }

  def perform(token); end
end
