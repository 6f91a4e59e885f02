# frozen_string_literal: true

# Regenerates the README's screenshots of the Locks tab (docs/screenshots/*.png): a
# redis-server with the module, one real Sidekiq process, a few locks as the gem takes
# them (one shared by accounts, with jobs waiting), headless Chromium on each page, then
# pngquant to keep the files small.
#
#   cd clients/ruby
#   RUBYLIB=$(../../../shared/ruby/sidekiq7-env.sh) SHARED_RUBY=../../../shared/ruby \
#     ruby -Ilib -Itest docs/screenshots/generate.rb
#
# With Sidekiq 8.1 on Ruby 3.3 they go to docs/screenshots/sidekiq8/ (test/run.sh shows the
# RUBYLIB that adds Debian's selenium-webdriver to Sidekiq 8's libraries).
require "support/harness"
require "redis_unique/sidekiq"
require "support/browser"
require "digest/md5"

H = RedisUnique::Harness
OUT = H.sidekiq8? ? File.join(__dir__, "sidekiq8") : __dir__
server = H::RedisServer.new
Sidekiq.configure_client { |c| c.redis = { url: server.url } }
raw = H.sidekiq7? ? RedisClient.config(url: server.url).new_client : (require "redis"; Redis.new(url: server.url))
client = RedisUnique::Client.new(raw)
app = File.join(H::RUBY_DIR, "test/app/app.rb")
worker = H::SidekiqProcess.new(app: app, redis_url: server.url, queues: %w[default], concurrency: 2,
                               env: { "REAPER_INTERVAL" => "3600" })
live = worker.wait_ready(client.connection)
http = nil
browser = nil
begin
  digest = ->(klass, args) { "uniquejobs:#{Digest::MD5.hexdigest(JSON.generate({ "class" => klass, "queue" => "default", "lock_args" => args }.sort))}" }
  meta = ->(klass, args, extra = {}) { { "class" => klass, "queue" => "default", "lock_args" => args }.merge(extra) }
  jid = -> { SecureRandom.hex(12) }
  dead = "worker-7:4242:0f3a9c2b11de"
  sync = digest.call("SyncUserJob", [42])
  client.lock(sync, jid.call, ttl: 3600, type: "until_executed", owner: live, meta: meta.call("SyncUserJob", [42]))
  client.lock(digest.call("SyncUserJob", [7]), jid.call, ttl: 3600, type: "until_executed", owner: dead,
                                                         meta: meta.call("SyncUserJob", [7]))
  export = digest.call("ExportJob", ["acme"])
  3.times do |i|
    client.lock(export, jid.call, limit: 3, ttl: 900 - i * 120, type: "while_executing", owner: i.zero? ? dead : live,
                                  meta: meta.call("ExportJob", ["acme"], "limit" => 3))
  end
  client.lock(digest.call("DigestMailJob", [1]), jid.call, ttl: 300, type: "until_expired",
                                                           meta: meta.call("DigestMailJob", [1]))
  client.lock("#{digest.call("ImportJob", [9])}:RUN", jid.call, type: "while_executing", owner: "queued",
                                                                meta: meta.call("ImportJob", [9]))
  5.times { client.lock(sync, jid.call, type: "until_executed") } # denied
  w = jid.call
  client.lock("uniquejobs:demo:wait", w, ttl: 60, type: "until_executing")
  waiter = Thread.new { RedisUnique::Client.new(H.sidekiq7? ? RedisClient.config(url: server.url).new_client : Redis.new(url: server.url)).lock("uniquejobs:demo:wait", jid.call, wait: 5, type: "until_executing") }
  H.wait_until { client.connection.call("INFO", "unique")[/unique_waiting:(\d+)/, 1].to_i == 1 }
  client.unlock("uniquejobs:demo:wait", w)
  waiter.join

  # A limit shared by accounts (lock_group): holders of three groups, and jobs waiting.
  reports = "#{digest.call("RenderReportJob", [])}:RUN"
  report_meta = meta.call("RenderReportJob", [], "limit" => 8, "group_limit" => 4)
  { "acme" => 4, "globex" => 2, "initech" => 2 }.each do |account, n|
    n.times do
      client.lock(reports, jid.call, limit: 8, group: account, group_limit: 4, type: "while_executing", owner: live,
                                     meta: report_meta)
    end
  end
  waiting = { "acme" => 5, "globex" => 1 }.flat_map do |account, n|
    Array.new(n) do
      Thread.new do
        RedisUnique::Client.new(H.sidekiq7? ? RedisClient.config(url: server.url).new_client : Redis.new(url: server.url))
                           .lock(reports, jid.call, limit: 8, group: account, group_limit: 4, wait: 60,
                                                    type: "while_executing", meta: report_meta)
      end
    end
  end
  H.wait_until { client.waiters(reports) == 6 }

  http = RedisUnique::Browser::Server.new(RedisUnique::WebSupport.app)
  browser = RedisUnique::Browser.driver
  browser.manage.window.resize_to(1100, 1040)
  { "locks" => "/locks", "lock" => "/locks/lock?key=#{CGI.escape(export)}", "owners" => "/locks/owners",
    "metrics" => "/locks/metrics", "groups" => "/locks/lock?key=#{CGI.escape(reports)}" }.each do |name, path|
    browser.navigate.to(http.url(path))
    file = File.join(OUT, "#{name}.png")
    browser.save_screenshot(file)
    system("pngquant", "--force", "--quality=30-70", "--output", file, file) or warn "pngquant failed: #{file} kept as is"
    puts "#{file}: #{File.size(file)} bytes"
  end
ensure
  waiting&.each(&:kill) # blocked in their wait until the server stops
  browser&.quit
  http&.stop
  worker.stop
  server.stop
end
