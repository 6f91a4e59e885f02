# frozen_string_literal: true

# Jobs of the ReliableFetch tests. ChaosJob records its own start and end (with the pid of
# the process that runs it) in chaos:<token>, so that the test can check that no job ran
# twice at once and that every job ended.
require_relative "jobs"

module ChaosJobs
  module_function

  def record(token, event, job, n)
    TestJobs.conn.call("RPUSH", "chaos:#{token}",
                       JSON.generate("e" => event, "jid" => job.jid, "n" => n, "pid" => Process.pid, "t" => Time.now.to_f))
  end

  # The longest a held job waits for its go: reached only when a test fails before it lets
  # the job go (the job then ends as if let go).
  HELD_MAX = 180

  # A job of negative `millis` is held: it waits for a go from chaos:<token>:go (one a
  # job), so that a test can kill its process while it is certainly in flight.
  def run(job, token, n, millis)
    record(token, "start", job, n)
    if millis.negative?
      TestJobs.conn.blocking_call(HELD_MAX + 5, "BLPOP", "chaos:#{token}:go", HELD_MAX)
    else
      sleep(millis / 1000.0)
    end
    record(token, "end", job, n)
    TestJobs.conn.call("INCR", "chaos:#{token}:ends")
  end
end

class ChaosPlainJob
  include TestJobs::JOB
  sidekiq_options retry: 3

  def perform(token, n, millis)
    ChaosJobs.run(self, token, n, millis)
  end
end

class ChaosUntilExecutedJob
  include TestJobs::JOB
  sidekiq_options lock: :until_executed, retry: 3

  def perform(token, n, millis)
    ChaosJobs.run(self, token, n, millis)
  end
end

class ChaosWhileExecutingJob
  include TestJobs::JOB
  sidekiq_options lock: :while_executing, retry: 3

  def perform(token, n, millis)
    ChaosJobs.run(self, token, n, millis)
  end
end
