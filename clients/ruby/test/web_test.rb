# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/web"
require "rack/test"
require "cgi"
require "open3"

# The Locks tab through Rack (ruby-rack-test), against the real redis-server with the
# module, Sidekiq's own web app, its CSRF protection and its API.
class WebTest < Minitest::Test
  include TestHelpers
  include Rack::Test::Methods

  def app
    RedisUnique::WebSupport.app
  end

  def setup
    TestSuite.server
    RedisUnique::Web.redis = nil
  end

  def teardown
    RedisUnique::Web.redis = nil
  end

  def key(suffix = "")
    "web:#{token}#{suffix}"
  end

  def get_ok(path, params = {})
    get(path, params)
    assert_equal 200, last_response.status, "GET #{path}: #{last_response.body[0, 2000]}"
    last_response.body
  end

  # POSTs as a browser does from `from` (a page of the tab), with what this Sidekiq
  # checks (its CSRF token on 6 and 7, Sec-Fetch-Site on 8.1); returns the response.
  def post_form(path, params, from: "/locks")
    page = get_ok(from)
    post(path, *RedisUnique::WebSupport.same_origin(params, page))
    last_response
  end

  # Every row of the Locks list for `pattern`, walking its SCAN cursor to the end: one
  # request is one SCAN step, and in the suite's shared database one step may find none.
  def locks_rows(pattern, count: 1000)
    rows = []
    cursor = nil
    10_000.times do
      body = get_ok("/locks", { pattern: pattern, count: count, cursor: cursor }.compact)
      rows.concat(body.scan(%r{<tr>\s*<td class="key">.*?</tr>}m))
      cursor = body[/id="redis-unique-next" href="[^"]*cursor=(\d+)/, 1]
      return rows unless cursor
    end
    flunk "the cursor of #{pattern} never ended"
  end

  def esc(text)
    Rack::Utils.escape_html(text)
  end

  def test_the_tab_is_registered_in_sidekiqs_layout
    body = get_ok("/locks")
    assert_match %r{<a href="/locks">Locks</a>}, body, "the Locks tab in Sidekiq's navigation"
    # Sidekiq's own layout: 6 and 7 are Bootstrap's (application.css); 8 has its own
    # stylesheet (style.css), with a nonce.
    stylesheet = RedisUnique::Harness.sidekiq8? ? "stylesheets/style.css" : "stylesheets/application.css"
    assert_includes body, stylesheet, "Sidekiq's own layout"
    assert_includes body, "redis-unique-locks"
    assert_equal "application/javascript", get("/locks/confirm.js").headers["Content-Type"]
    assert_includes last_response.body, "window.confirm"
  end

  def test_scripts_carry_the_csp_nonce_on_sidekiq_7
    body = get_ok("/locks/lock", key: key)
    scripts = body.scan(/<script\b[^>]*>/)
    ours = scripts.grep(%r{locks/confirm\.js})
    assert_equal 1, ours.size, scripts.inspect
    refute_match(%r{<script(?![^>]*\bsrc=)[^>]*>\s*\S}, body, "no inline script")
    unless RedisUnique::Harness.sidekiq7?
      refute_includes last_response.headers["Content-Security-Policy"].to_s, "nonce-", "Sidekiq 6.4 uses no nonce"
      refute_includes ours.first, "nonce="
      return
    end

    csp = last_response.headers["Content-Security-Policy"]
    nonce = csp[/script-src 'self' 'nonce-([^']+)'/, 1]
    assert nonce, csp
    assert_includes ours.first, %(nonce="#{nonce}")
    scripts.each { |s| assert_includes s, %(nonce="#{nonce}"), "every script carries this response's nonce: #{s}" }
  end

  def test_locks_page_lists_holders_limit_and_earliest_lease_end
    client.lock(key(":a"), "ja1", ttl: 600, limit: 2, type: "until_executed", meta: { "limit" => 2, "class" => "A" })
    client.lock(key(":a"), "ja2", ttl: 30, limit: 2, type: "until_executed", meta: { "limit" => 2 })
    client.lock(key(":b"), "jb1", type: "while_executing")
    client.lock("other:#{token}", "jo", ttl: 60)
    rows = locks_rows("web:#{token}*")
    assert_equal 2, rows.size, "the pattern keeps only this test's two locks"
    a = rows.find { |r| r.include?(esc(key(":a"))) }
    assert_match(/2: <code>ja1<\/code> <code>ja2<\/code>/, a)
    assert_match %r{<td>2</td>}, a, "LIMIT from META"
    earliest = client.holders(key(":a")).map(&:expires_at).min
    assert_includes a, earliest.utc.strftime("%Y-%m-%d %H:%M:%S UTC"), "the earliest lease end (ja2's)"
    b = rows.find { |r| r.include?(esc(key(":b"))) }
    assert_includes b, "no lease"
    assert_includes b, "<td>—</td>", "no LIMIT known"
    refute_includes rows.join, "other:#{token}"
  end

  # A job pushed with lock_limit: the gem records its LIMIT in META, and the page shows it.
  class WebLimitedJob
    include Sidekiq::Job
    sidekiq_options queue: "web_nobody", lock: :until_executed, lock_limit: 3, lock_ttl: 600

    def perform(*); end
  end

  def test_a_sidekiq_jobs_lock_shows_its_lock_limit
    jid = WebLimitedJob.perform_async(token)
    digest = digest_of(WebLimitedJob, token, queue: "web_nobody")
    assert_equal [jid], client.locked_by(digest)
    row = locks_rows(digest).first.to_s
    assert_includes row, %(<code>#{jid}</code>)
    assert_includes row, "<td>3</td>"
    assert_includes row, "until_executed"
  ensure
    Sidekiq::Queue.new("web_nobody").clear
  end

  def test_locks_pages_walk_the_scan_cursor_one_step_each
    keys = Array.new(7) { |i| key(":#{i}") }
    keys.each { |k| client.lock(k, "j", ttl: 600) }
    seen = []
    cursor = nil
    steps = 0
    loop do
      body = get_ok("/locks", { pattern: "web:#{token}:*", count: 2, cursor: cursor }.compact)
      steps += 1
      seen.concat(body.scan(%r{<td class="key"><a [^>]*>([^<]+)</a>}).flatten.map { |k| CGI.unescapeHTML(k) })
      cursor = body[/id="redis-unique-next" href="[^"]*cursor=(\d+)/, 1]
      break unless cursor
      raise "too many steps" if steps > 10_000
    end
    assert_equal keys.sort, seen.sort, "every lock once over the steps"
    assert_operator steps, :>, 1, "COUNT 2 takes several steps"
  end

  def test_one_lock_shows_every_holder_and_where_sidekiq_has_its_job
    queue = "webq#{rand(1 << 30)}"
    queued = Sidekiq::Client.push("class" => "WebNobodyRunsThis", "queue" => queue, "args" => [token])
    scheduled = Sidekiq::Client.push("class" => "WebNobodyRunsThis", "queue" => queue, "args" => [token],
                                     "at" => Time.now.to_f + 3600)
    retry_jid = SecureRandom.hex(12)
    retry_job = { "class" => "WebNobodyRunsThis", "queue" => queue, "args" => [token], "jid" => retry_jid,
                  "retry_count" => 0, "error_message" => "x", "error_class" => "RuntimeError",
                  "failed_at" => Time.now.to_f }
    conn.call("ZADD", "retry", (Time.now.to_f + 3600).to_s, JSON.generate(retry_job))
    dead_jid = SecureRandom.hex(12)
    Sidekiq::DeadSet.new.kill(JSON.generate(retry_job.merge("jid" => dead_jid)), notify_failure: false)
    gone = SecureRandom.hex(12)
    k = key
    meta = { "class" => "WebNobodyRunsThis", "queue" => queue, "note" => "meta-#{token}" }
    tokens = [queued, scheduled, retry_jid, dead_jid, gone].to_h do |jid|
      [jid, client.lock(k, jid, limit: 0, ttl: 900, type: "until_executed", owner: "host:1:abc", meta: meta)]
    end
    body = get_ok("/locks/lock", key: k)
    holders = body.scan(%r{<tr class="holder">.*?</tr>}m)
    assert_equal 5, holders.size
    row = ->(jid) { holders.find { |h| h.include?(%(<code class="jid">#{jid}</code>)) } or flunk("no row for #{jid}") }
    tokens.each do |jid, tok|
      r = row.call(jid)
      assert_includes r, %(<code class="token">#{tok}</code>)
      assert_includes r, "until_executed"
      assert_includes r, "host:1:abc"
      assert_match(/1[45]m \d\ds/, r, "time left")
      assert_includes r, esc(JSON.pretty_generate(meta)), "META as formatted JSON"
    end
    link = ->(jid) { CGI.unescapeHTML(row.call(jid)) }
    assert_includes link.call(queued), %(href="/queues/#{queue}">in queue #{queue}<)
    assert_match %r{href="/scheduled/[\d.]+-#{scheduled}">scheduled<}, link.call(scheduled)
    assert_match %r{href="/retries/[\d.]+-#{retry_jid}">retry<}, link.call(retry_jid)
    assert_match %r{href="/morgue/[\d.]+-#{dead_jid}">dead<}, link.call(dead_jid)
    assert_includes link.call(gone), "not in Sidekiq's queues or sets"
    # The links lead to Sidekiq's own pages for those jobs.
    %w[retries morgue scheduled].each do |page|
      href = CGI.unescapeHTML(body)[%r{href="(/#{page}/[^"]+)"}, 1]
      assert_includes get_ok(href), token, "Sidekiq's #{page} page shows the job"
    end
  ensure
    Sidekiq::Queue.new(queue).clear if queue
    Sidekiq::ScheduledSet.new.find_job(scheduled)&.delete if scheduled
    conn.call("ZREM", "retry", JSON.generate(retry_job)) if retry_job
    Sidekiq::DeadSet.new.find_job(dead_jid)&.delete if dead_jid
  end

  def test_a_running_jobs_holder_links_to_busy_and_its_live_owner
    TestSuite.workers
    jid = UntilExecutedDefaultJob.perform_async(token, { "hold" => true })
    digest = digest_of(UntilExecutedDefaultJob, token, { "hold" => true })
    wait_events("start")
    # Sidekiq publishes its running jobs with each heartbeat (every 5 s on 6.4, 10 s on 7).
    row = wait_until(interval: 0.5, message: "the job shown running") do
      get_ok("/locks/lock", key: digest)[%r{<tr class="holder">.*?</tr>}m].then { |r| r&.include?(">running<") && r }
    end
    assert_includes row, %(<code class="jid">#{jid}</code>)
    assert_includes CGI.unescapeHTML(row), %(href="/busy")
    owner = CGI.unescapeHTML(row[%r{<td class="owner">([^<]+)</td>}, 1])
    assert_includes TestSuite.workers.map(&:identity), owner, "the owner is the live process running it"
    assert_includes get_ok("/locks/owners")[%r{<tr class="owner-row status-live">\s*<td><code class="owner">#{Regexp.escape(esc(owner))}</code>}], owner
  ensure
    release
    wait_events("done") if jid
  end

  def test_a_counting_lock_looks_up_the_jobs_of_its_first_holders_only
    k = key
    (RedisUnique::Web.job_lookup_limit + 2).times { |i| client.lock(k, format("j%03d", i), limit: 0, ttl: 600) }
    rows = get_ok("/locks/lock", key: k).scan(%r{<tr class="holder">.*?</tr>}m)
    assert_equal RedisUnique::Web.job_lookup_limit + 2, rows.size
    assert_equal 2, rows.count { |r| r.include?("job not looked up") }
    assert_includes rows[RedisUnique::Web.job_lookup_limit - 1], "not in Sidekiq"
  end

  def test_one_lock_shows_the_clients_waiting
    k = key
    client.lock(k, "holder", ttl: 600)
    waiter = RedisUnique::Client.new(TestSuite.raw_connection)
    got = Thread.new { waiter.lock(k, "waiter", wait: 20) }
    wait_until(message: "a waiter") { client.waiters(k) == 1 }
    body = get_ok("/locks/lock", key: k)
    assert_equal "1", body[%r{id="redis-unique-waiting">(\d+)<}, 1], "the waiters of this lock"
    assert_equal "0", get_ok("/locks/lock", key: "#{k}:other")[%r{id="redis-unique-waiting">(\d+)<}, 1]
    post_form("/locks/unlock", { "key" => k, "jid" => "holder" })
    assert got.join(10), "the waiter is served"
    assert got.value, "the waiter got the lock the page freed"
    assert_equal ["waiter"], client.locked_by(k)
  end

  def test_a_lock_with_groups_shows_holding_and_waiting_per_group
    k = key
    client.lock(k, "plain", limit: 0, ttl: 600)
    client.lock(k, "a1", limit: 3, group: "acme", group_limit: 2, ttl: 600, meta: { "group_limit" => 2 })
    client.lock(k, "a2", limit: 3, group: "acme", group_limit: 2, ttl: 600, mode: :shared)
    waiter = RedisUnique::Client.new(TestSuite.raw_connection)
    got = Thread.new { waiter.lock(k, "a3", limit: 3, group: "acme", group_limit: 2, ttl: 600, wait: 20) }
    wait_until(message: "a waiter of acme") { client.waiters(k) == 1 }
    body = get_ok("/locks/lock", key: k)
    rows = body.scan(%r{<tr class="group-row">(.*?)</tr>}m).map do |(row)|
      %w[group holding waiting].map { |c| row[%r{<td class="#{c}">(.*?)</td>}m, 1] }
    end
    assert_equal [["(no group)", "1", "0"], %w[acme 2 1]], rows, "nil first, then by name"
    assert_includes body, "a group holds at most 2 (GROUPLIMIT, from META)"
    holders = body.scan(%r{<tr class="holder">(.*?)</tr>}m).map do |(row)|
      [row[%r{<code class="jid">(.*?)</code>}, 1], row[%r{<td class="group">(.*?)</td>}, 1], row[%r{<td class="mode">(.*?)</td>}, 1]]
    end
    assert_equal [%w[plain — —], %w[a1 acme —], %w[a2 acme shared]], holders
    # A lock without groups shows neither the table nor the columns.
    client.lock(key(":plain"), "j", ttl: 600)
    plain = get_ok("/locks/lock", key: key(":plain"))
    refute_includes plain, "redis-unique-groups"
    refute_includes plain, "<th>Group</th>"
    refute_includes plain, "<th>Mode</th>"
    client.lock(key(":rw"), "r", limit: 2, mode: :shared, ttl: 600)
    readers = get_ok("/locks/lock", key: key(":rw"))
    assert_includes readers, %(<td class="mode">shared</td>), "a mode without a group: its column alone"
    refute_includes readers, "<th>Group</th>"
    # Escaped like everything else.
    client.lock(key(":xss"), "x", group: "<b>g</b>", ttl: 600)
    assert_includes get_ok("/locks/lock", key: key(":xss")), "<td class=\"group\">#{esc("<b>g</b>")}</td>"
    client.unlock(k, "a1")
    assert got.value, "the waiter is served"
  end

  def test_unlock_removes_one_holder
    k = key
    client.lock(k, "j1", limit: 2, ttl: 600)
    client.lock(k, "j2", limit: 2, ttl: 600)
    res = post_form("/locks/unlock", { "key" => k, "jid" => "j1" }, from: "/locks/lock?key=#{CGI.escape(k)}")
    assert_equal 302, res.status, res.body
    assert_equal ["j2"], client.locked_by(k)
    follow_redirect!
    assert_includes last_response.body, "The holder was removed."
    refute_includes last_response.body, %(<code class="jid">j1</code>)
    res = post_form("/locks/unlock", { "key" => k, "jid" => "j1" })
    follow_redirect!
    assert_includes last_response.body, "no longer held the lock"
  end

  # Every action refuses a POST that another site could make, by this Sidekiq's own rule
  # (a token on 6 and 7, Sec-Fetch-Site on 8.1), and the same POST from the app works.
  def test_every_action_refuses_a_cross_site_post
    k = key
    client.lock(k, "j1", ttl: 600, owner: "dead-host:1")
    get_ok("/locks") # a session exists
    actions = {
      "/locks/unlock" => { "key" => k, "jid" => "j1" },
      "/locks/delete" => { "key" => k },
      "/locks/owners/free" => { "owner" => "dead-host:1" }
    }
    actions.each do |path, params|
      RedisUnique::WebSupport.cross_site_attempts(params).each do |attempt_params, env|
        post(path, attempt_params, env)
        assert_equal 403, last_response.status, "#{path} #{env.inspect} #{attempt_params.inspect}"
      end
    end
    assert_equal ["j1"], client.locked_by(k), "nothing changed"
    assert_equal 302, post_form("/locks/unlock", actions["/locks/unlock"]).status
    assert_empty client.locked_by(k), "the same POST from the app works"
  end

  def test_delete_a_lock_and_never_another_type
    k = key
    client.lock(k, "j1", limit: 0, ttl: 600)
    client.lock(k, "j2", limit: 0)
    res = post_form("/locks/delete", { "key" => k })
    assert_equal 302, res.status
    assert_equal 0, conn.call("EXISTS", k)
    follow_redirect!
    assert_includes last_response.body, "The lock was deleted."
    conn.call("SET", key(":string"), "x")
    post_form("/locks/delete", { "key" => key(":string") })
    assert_equal "x", conn.call("GET", key(":string")), "a key of another type stays"
    follow_redirect!
    assert_includes last_response.body, "nothing was deleted"
  end

  def test_owners_page_and_freeing_a_dead_owners_locks
    live = TestSuite.workers.first.identity
    dead = "deadhost:#{900_000 + rand(90_000)}:#{SecureRandom.hex(6)}"
    # Registered an hour ahead: the suite's live reapers take an identity without a heartbeat
    # for dead only `dead_after` seconds after it registered, and would otherwise free its
    # locks themselves in the middle of this test on a slow machine. The page does not read
    # the time.
    conn.call("ZADD", RedisUnique::Web::OWNERS_KEY, "NX", (Time.now.to_i + 3600).to_s, dead)
    3.times { |i| client.lock(key(":dead#{i}"), "jd#{i}", ttl: 600, owner: dead) }
    client.lock(key(":live"), "jl", ttl: 600, owner: live)
    client.lock(key(":queued"), "jq", ttl: 600, owner: "queued")
    client.lock(key(":other"), "jo", ttl: 600, owner: "web-#{token}")
    body = get_ok("/locks/owners")
    row = ->(o) { body[%r{<tr class="owner-row[^"]*">\s*<td><code class="owner">#{Regexp.escape(o)}</code>.*?</tr>}m] or flunk("no row for #{o}") }
    assert_includes row.call(dead), "status-dead"
    assert_match %r{<td>3</td>}, row.call(dead)
    assert_includes row.call(dead), "Free its locks"
    assert_includes row.call(live), "live Sidekiq process"
    refute_includes row.call(live), "Free its locks"
    refute_includes row.call("queued"), "Free its locks"
    assert_includes row.call("web-#{token}"), "not a Sidekiq identity"
    refute_includes row.call("web-#{token}"), "Free its locks"
    # A live owner is never freed, even when asked.
    res = post_form("/locks/owners/free", { "owner" => live }, from: "/locks/owners")
    assert_equal 302, res.status
    assert_equal ["jl"], client.locked_by(key(":live"))
    follow_redirect!
    assert_includes last_response.body, "not a dead Sidekiq process"
    post_form("/locks/owners/free", { "owner" => dead }, from: "/locks/owners")
    3.times { |i| assert_empty client.locked_by(key(":dead#{i}")) }
    assert_equal ["jl"], client.locked_by(key(":live"))
    assert_equal ["jq"], client.locked_by(key(":queued"))
    follow_redirect!
    freed = last_response.body[/#{Regexp.escape(esc("The owner's locks were freed."))} \((\d+) holder\(s\)\)/, 1]
    # At least its three holders: REAP also counts the ended leases of other tests that it
    # meets in the shared database.
    assert_operator freed.to_i, :>=, 3, last_response.body[/id="redis-unique-notice">[^<]*/]
  ensure
    conn.call("ZREM", RedisUnique::Web::OWNERS_KEY, dead) if dead
  end

  def test_metrics_page_table_chart_and_gauges
    type = "webmetrics#{rand(1 << 30)}"
    k = key
    2.times { |i| client.lock(key(":#{i}"), "j", ttl: 600, type: type) }
    refute client.lock(key(":0"), "other", type: type), "denied"
    client.unlock(key(":1"), "j")
    body = get_ok("/locks/metrics")
    row = body[%r{<tr data-type="#{type}">.*?</tr>}m]
    assert row, "a row for #{type}"
    { "acquired" => 2, "denied" => 1, "released" => 1, "expired" => 0 }.each do |counter, n|
      assert_includes row, %(<td data-counter="#{counter}">#{n}</td>), counter
    end
    assert_match %r{<tr data-type="total">}, body
    gauge = body[%r{data-gauge="locks"><span class="value">([\d,]+)<}, 1].delete(",").to_i
    assert_operator gauge, :>=, 1
    assert_includes body, "<svg"
    body = get_ok("/locks/metrics", type: type)
    svg = body[%r{<svg.*?</svg>}m]
    points = svg[%r{data-series="acquired"[^>]*points="([^"]+)"}, 1].split.map { |p| p.split(",").map(&:to_f) }
    assert_operator points.size, :>=, 2
    # The acquisitions fall in this minute, or in the one before when the minute turned
    # between the locks and the page: one of the last two points sits above the empty start.
    assert_operator points.last(2).map(&:last).min, :<, points.first[1], "the 2 acquisitions sit above the empty start"
    refute_match %r{(src|href)="https?://}, svg, "nothing from another host"
    assert k
  end

  def test_a_rated_lock_shows_its_rate_state_and_the_metrics_its_rate_denied
    type = "webrate#{rand(1 << 30)}"
    k = key
    rate = { limit: 2, per: :minute, burst: 1 }
    2.times { |i| assert client.lock(k, "j#{i}", limit: 10, ttl: 600, type: type, rate: rate), "grant #{i}" }
    refute client.lock(k, "j2", limit: 10, ttl: 600, type: type, rate: rate), "the rate refuses a third"
    state = client.rate(k)
    body = get_ok("/locks/lock", key: k)
    table = body[%r{<table class="table table-bordered" id="redis-unique-rate">.*?</table>}m]
    assert table, "a rate table"
    assert_includes table, %(<td class="limit">2 per minute</td>)
    assert_includes table, %(<td class="remaining">0</td>)
    assert_includes table, %(<td class="allowed-at">#{state.allowed_at.utc.strftime("%Y-%m-%d %H:%M:%S.%L UTC")}</td>)
    assert_operator state.allowed_at, :>, Time.now + 20, "the next slot half a minute away"
    row = get_ok("/locks/metrics")[%r{<tr data-type="#{type}">.*?</tr>}m]
    { "acquired" => 2, "denied" => 1, "rate_denied" => 1 }.each do |counter, n|
      assert_includes row, %(<td data-counter="#{counter}">#{n}</td>), counter
    end
    # a lock no rate was spent on has no rate table
    client.lock(key(":plain"), "j", ttl: 600)
    refute_includes get_ok("/locks/lock", key: key(":plain")), %(id="redis-unique-rate")
  ensure
    conn.call("DEL", key, key(":plain"))
  end

  def test_metrics_page_shows_the_renewals_lost
    before = conn.call("HGET", "redis_unique:stats", "renewal_lost").to_i
    conn.call("HINCRBY", "redis_unique:stats", "renewal_lost", 1)
    body = get_ok("/locks/metrics")
    after = conn.call("HGET", "redis_unique:stats", "renewal_lost").to_i
    shown = body[%r{data-gauge="renewal_lost"><span class="value">([\d,]+)<}, 1].delete(",").to_i
    # the count then: a Sidekiq process of another test may count a loss of its own meanwhile
    assert_operator shown, :>=, before + 1
    assert_operator shown, :<=, after
    assert_includes body, "unique_renewal_lost"
  ensure
    conn.call("HINCRBY", "redis_unique:stats", "renewal_lost", -1)
  end

  def test_everything_is_escaped
    evil_key = %(xss:#{token}:<script>alert("k")</script>'")
    evil_jid = %(<script>alert('j')</script>)
    evil_owner = %("><img src=x onerror=alert(1)>)
    client.lock(evil_key, evil_jid, ttl: 600, type: "xss", owner: evil_owner,
                                    meta: { "x" => %(</pre><script>alert("m")</script>) })
    pages = [locks_rows("xss:#{token}:*").join, get_ok("/locks/lock", key: evil_key), get_ok("/locks/owners")]
    pages.each do |body|
      refute_match(/<script>alert/, body)
      refute_includes body, "<img src=x"
    end
    assert_includes pages[0], esc(evil_key)
    assert_includes pages[1], esc(evil_jid)
    assert_includes pages[1], esc(JSON.pretty_generate({ "x" => %(</pre><script>alert("m")</script>) }))
    assert_includes pages[2], esc(evil_owner)
    # The lock page of that key still works through its escaped link, and Unlock takes the exact bytes.
    href = CGI.unescapeHTML(pages[0][%r{<td class="key"><a href="([^"]+)"}, 1])
    assert_includes get_ok(href), esc(evil_jid)
    post_form("/locks/unlock", { "key" => evil_key, "jid" => evil_jid })
    assert_empty client.locked_by(evil_key)
  end

  def test_without_the_module_the_tab_says_how_to_load_it
    # The page a browser posts from: a held lock's page, whose unlock form always has the
    # token (the Locks list has none when its SCAN step finds no lock in the shared database).
    held = "web:nomodule:#{token}"
    client.lock(held, "j1", ttl: 60)
    page = get_ok("/locks/lock?key=#{CGI.escape(held)}")
    bare = RedisUnique::Harness::RedisServer.new(load_module: false)
    RedisUnique::Web.redis = ConnectionPool.new(size: 1) { TestSuite.raw_connection(bare.url) }
    %w[/locks /locks/lock?key=x /locks/owners /locks/metrics].each do |path|
      body = get_ok(path)
      assert_includes body, "module is not loaded", path
      assert_includes body, "loadmodule", path
    end
    post("/locks/unlock", *RedisUnique::WebSupport.same_origin({ "key" => "x", "jid" => "y" }, page))
    assert_equal 302, last_response.status
    follow_redirect!
    assert_includes last_response.body, "module is not loaded"
  ensure
    RedisUnique::Web.redis = nil
    bare&.stop
  end

  # 100,000 locks: a Locks page is one SCAN step (COUNT at most 1000), never KEYS.
  def test_a_large_keyspace_takes_one_scan_step_per_request
    big = RedisUnique::Harness::RedisServer.new
    n = 100_000
    commands = +""
    n.times do |i|
      args = ["UNIQUE.LOCK", "big:#{i}", "j#{i}", "TTL", "3600000", "OWNER", "deadhost:1:abc"]
      commands << "*#{args.size}\r\n" << args.map { |a| "$#{a.bytesize}\r\n#{a}\r\n" }.join
    end
    out, st = Open3.capture2e("redis-cli", "-p", big.port.to_s, "--pipe", stdin_data: commands)
    assert st.success?, out
    raw = TestSuite.raw_connection(big.url)
    big_conn = RedisUnique::Connection.new(raw)
    assert_equal n, big_conn.call("DBSIZE")
    RedisUnique::Web.redis = ConnectionPool.new(size: 1) { TestSuite.raw_connection(big.url) }
    stats = lambda do
      info = big_conn.call("INFO", "commandstats")
      info.scan(/^cmdstat_([\w|.]+):calls=(\d+)/).to_h.transform_values(&:to_i)
    end

    big_conn.call("CONFIG", "RESETSTAT")
    body = get_ok("/locks")
    shown = body.scan(%r{<td class="key">}).size
    s = stats.call
    assert_equal 1, s["scan"], "one SCAN step: #{s}"
    assert_nil s["keys"]
    assert_operator shown, :>, 0
    assert_equal shown, s["unique.lockedby"], "one LOCKEDBY per key shown"
    assert_equal 1, s["command|info"], "the module probe (COMMAND INFO unique.lock): #{s}"
    assert_includes body, "COUNT 100 TYPE uniq-lock"

    big_conn.call("CONFIG", "RESETSTAT")
    next_href = CGI.unescapeHTML(body[/id="redis-unique-next" href="([^"]+)"/, 1])
    get_ok(next_href)
    assert_equal 1, stats.call["scan"], "the next page: one more step"

    big_conn.call("CONFIG", "RESETSTAT")
    body = get_ok("/locks", count: 1_000_000)
    assert_includes body, "COUNT 1000 TYPE uniq-lock", "COUNT is bounded"
    assert_equal 1, stats.call["scan"]

    # The Owners page counts over at most owner_scan_limit keys, step by step.
    big_conn.call("CONFIG", "RESETSTAT")
    body = get_ok("/locks/owners")
    assert_includes body, "the counts are partial"
    s = stats.call
    assert_operator s["scan"], :<=, (RedisUnique::Web.owner_scan_limit / 500) + 1
    assert_operator s["scan"], :>, 1
  ensure
    RedisUnique::Web.redis = nil
    big&.stop
  end
end
