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

  def run(job, token, n, millis)
    record(token, "start", job, n)
    sleep(millis / 1000.0)
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
