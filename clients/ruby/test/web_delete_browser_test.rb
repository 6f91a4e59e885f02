# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/browser"

# Sidekiq's own web pages in a real browser (headless Chromium), each button that removes
# or moves a job (the README's table "Removing and moving jobs"): Delete, Delete All,
# Kill, Kill All and a queue's Delete free the job's lock, so that the same job can be
# pushed again; Retry Now, Retry All and Add to Queue keep it for the same jid (or take it
# again, for a dead job).
class WebDeleteBrowserTest < Minitest::Test
  include TestHelpers

  class << self
    def browser
      @browser ||= begin
        TestSuite.server
        @http = RedisUnique::Browser::Server.new(RedisUnique::WebSupport.app)
        Minitest.after_run { shutdown }
        RedisUnique::Browser.driver
      end
    end

    def http
      browser
      @http
    end

    def shutdown
      begin
        @browser&.quit
      rescue StandardError => e
        warn "chromium quit: #{e.class}: #{e.message}"
      end
      @http&.stop
      @browser = @http = nil
    end
  end

  def browser
    self.class.browser
  end

  def parked
    "parked-#{token}"
  end

  def teardown
    Sidekiq::Queue.new(parked).clear
    [Sidekiq::ScheduledSet, Sidekiq::RetrySet, Sidekiq::DeadSet].each do |set|
      set.new.select { |e| e.args.first.to_s.start_with?(token) }.each(&:delete)
    end
  end

  def visit(path)
    browser.navigate.to(self.class.http.url(path))
  end

  # Clicked as a user does: scrolled into view first (Sidekiq 8's navigation bar is fixed).
  def click(element)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click
  end

  def wait_for(message, &block)
    wait_until(timeout: 15, interval: 0.05, message: message) do
      block.call
    rescue Selenium::WebDriver::Error::NoSuchElementError, Selenium::WebDriver::Error::StaleElementReferenceError
      nil
    end
  end

  def push(arg = token, klass: UntilExecutedDefaultJob, **opts)
    setter = klass.set(queue: parked, lock_ttl: 600)
    jid = opts[:in] ? setter.perform_in(opts[:in], arg) : setter.perform_async(arg)
    digest = digest_of(klass, arg, queue: parked)
    assert_equal [jid], client.locked_by(digest)
    [jid, digest]
  end

  # A pushed job put in the retry set as Sidekiq's retry puts it (its lock stays with it),
  # due in an hour (no poller moves it meanwhile).
  def retrying(arg = token, klass: UntilExecutedDefaultJob)
    jid, digest = push(arg, klass: klass)
    payload = conn.call("LRANGE", "queue:#{parked}", 0, -1).find { |p| JSON.parse(p)["jid"] == jid }
    conn.call("LREM", "queue:#{parked}", 1, payload)
    job = JSON.parse(payload).merge("retry_count" => 0, "failed_at" => Time.now.to_f, "error_class" => "RuntimeError",
                                    "error_message" => "failed on purpose")
    conn.call("ZADD", "retry", (Time.now.to_f + 3600).to_s, JSON.generate(job))
    [jid, digest]
  end

  # A job killed from the retry set (in the dead set, its lock freed).
  def dead(arg = token)
    jid, digest = retrying(arg)
    Sidekiq::RetrySet.new.find_job(jid).kill
    assert_empty client.locked_by(digest)
    [jid, digest]
  end

  def key_of(set, jid)
    entry = set.find_job(jid) or flunk("#{jid} not in #{set.name}")
    "#{entry.score}-#{jid}"
  end

  # Presses a button, accepts Sidekiq's "Are you sure?" when it asks (its application.js;
  # Debian's Sidekiq 6.4 package ships none, and some buttons do not ask), until `done`.
  def press(button, message, &done)
    click(button)
    wait_for(message) do
      browser.switch_to.alert.accept
      false
    rescue Selenium::WebDriver::Error::NoSuchAlertError
      done.call
    end
  end

  # A "... All" button of a set's page: a form of its own on Sidekiq 6 and 7, a button with
  # a formaction on 8.
  def all_button(path)
    wait_for("the #{path} button") do
      browser.find_elements(css: "[formaction$='/#{path}'], form[action$='/#{path}'] input[type=submit]").first
    end
  end

  def test_delete_on_a_queue_page_frees_the_lock
    jid, digest = push
    visit("/queues/#{parked}")
    form = wait_for("the job's row") do
      browser.find_elements(css: "form[action$='/delete']").find do |f|
        f.find_elements(css: "input[name=key_val]").any? { |i| i.attribute("value").include?(jid) }
      end
    end
    click(form.find_element(css: "input[name=delete]"))
    # Sidekiq asks "Are you sure?" from its application.js, which Debian's Sidekiq 6.4
    # package does not ship: there the form is sent at once.
    wait_for("the confirmation dialog accepted, then the job deleted") do
      browser.switch_to.alert.accept
      false
    rescue Selenium::WebDriver::Error::NoSuchAlertError
      Sidekiq::Queue.new(parked).size.zero?
    end
    wait_for("its lock freed") { client.locked_by(digest).empty? }
    assert UntilExecutedDefaultJob.set(queue: parked).perform_async(token), "the same job can be pushed again"
  end

  def test_delete_on_a_scheduled_jobs_page_frees_the_lock
    jid, digest = push(in: 3600)
    entry = Sidekiq::ScheduledSet.new.find_job(jid)
    visit("/scheduled/#{entry.score}-#{jid}")
    button = wait_for("the Delete button") { browser.find_element(css: "input[name=delete]") }
    click(button)
    wait_for("the job deleted") { Sidekiq::ScheduledSet.new.find_job(jid).nil? }
    wait_for("its lock freed") { client.locked_by(digest).empty? }
    assert UntilExecutedDefaultJob.set(queue: parked).perform_in(3600, token), "the same job can be pushed again"
  end

  def test_kill_on_the_retries_page_frees_the_lock_and_the_dead_job_can_be_retried
    jid, digest = retrying
    visit("/retries")
    box = wait_for("the job's checkbox") do
      browser.find_elements(css: "input[name='key[]']").find { |b| b.attribute("value").end_with?(jid) }
    end
    click(box)
    press(browser.find_element(css: "input[name=kill]"), "the job killed") { Sidekiq::DeadSet.new.find_job(jid) }
    wait_for("its lock freed") { client.locked_by(digest).empty? }

    visit("/morgue/#{key_of(Sidekiq::DeadSet.new, jid)}")
    press(wait_for("Retry Now") { browser.find_element(css: "input[name=retry]") }, "the dead job queued") do
      queue_jids(parked).include?(jid)
    end
    assert_equal [jid], client.locked_by(digest), "Retry Now on a dead job takes its lock again"
  end

  def test_retry_now_on_a_retry_keeps_the_lock
    jid, digest = retrying
    visit("/retries/#{key_of(Sidekiq::RetrySet.new, jid)}")
    press(wait_for("Retry Now") { browser.find_element(css: "input[name=retry]") }, "the job queued") do
      queue_jids(parked).include?(jid)
    end
    assert_nil Sidekiq::RetrySet.new.find_job(jid)
    assert_equal [jid], client.locked_by(digest), "the same jid holds it"
  end

  def test_add_to_queue_on_a_scheduled_job_keeps_the_lock
    jid, digest = push(in: 3600)
    visit("/scheduled/#{key_of(Sidekiq::ScheduledSet.new, jid)}")
    press(wait_for("Add to Queue") { browser.find_element(css: "input[name=add_to_queue]") }, "the job queued") do
      queue_jids(parked).include?(jid)
    end
    assert_equal [jid], client.locked_by(digest)
  end

  def test_delete_on_a_retry_and_on_a_dead_job_frees_the_lock
    jid, digest = retrying
    visit("/retries/#{key_of(Sidekiq::RetrySet.new, jid)}")
    press(wait_for("Delete") { browser.find_element(css: "input[name=delete]") }, "the retry deleted") do
      Sidekiq::RetrySet.new.find_job(jid).nil?
    end
    wait_for("its lock freed") { client.locked_by(digest).empty? }

    # a dead until_expired job still holds its lock (as one whose retries ran out): Delete frees it
    jid, digest = retrying("#{token}-expired", klass: UntilExpiredDefaultJob)
    Sidekiq::RetrySet.new.find_job(jid).kill
    assert_equal [jid], client.locked_by(digest), "killed: until_expired keeps its lock"
    visit("/morgue/#{key_of(Sidekiq::DeadSet.new, jid)}")
    press(wait_for("Delete") { browser.find_element(css: "input[name=delete]") }, "the dead job deleted") do
      Sidekiq::DeadSet.new.find_job(jid).nil?
    end
    wait_for("its lock freed") { client.locked_by(digest).empty? }
  end

  def test_kill_all_frees_the_locks_of_every_killed_job
    held = Array.new(2) { |i| retrying("#{token}-#{i}") }
    visit("/retries")
    press(all_button("retries/all/kill"), "the retries killed") do
      held.all? { |jid, _| Sidekiq::DeadSet.new.find_job(jid) }
    end
    held.each { |jid, digest| wait_for("#{jid}'s lock freed") { client.locked_by(digest).empty? } }
  end

  def test_retry_all_keeps_each_lock
    held = Array.new(2) { |i| retrying("#{token}-#{i}") }
    visit("/retries")
    press(all_button("retries/all/retry"), "the retries queued") do
      (held.map(&:first) - queue_jids(parked)).empty?
    end
    held.each { |jid, digest| assert_equal [jid], client.locked_by(digest) }
  end

  def test_delete_all_on_the_retries_and_dead_pages_frees_the_locks
    jid, digest = retrying
    visit("/retries")
    press(all_button("retries/all/delete"), "the retries deleted") { Sidekiq::RetrySet.new.find_job(jid).nil? }
    wait_for("its lock freed") { client.locked_by(digest).empty? }

    jid, digest = retrying("#{token}-expired", klass: UntilExpiredDefaultJob)
    Sidekiq::RetrySet.new.find_job(jid).kill
    visit("/morgue")
    press(all_button("morgue/all/delete"), "the dead jobs deleted") { Sidekiq::DeadSet.new.find_job(jid).nil? }
    wait_for("the dead until_expired job's lock freed") { client.locked_by(digest).empty? }
  end

  # Retry All retries every dead job: this test's dead set holds only its own.
  def test_retry_all_on_the_dead_page_takes_each_lock_again
    with_own_dead_set do
      jid, digest = dead
      visit("/morgue")
      press(all_button("morgue/all/retry"), "the dead job queued") { queue_jids(parked).include?(jid) }
      assert_equal [jid], client.locked_by(digest)
    end
  end

  def test_delete_of_a_queue_frees_the_locks_of_its_jobs
    held = Array.new(2) { |i| push("#{token}-#{i}") }
    visit("/queues")
    form = wait_for("the queue's form") do
      browser.find_elements(css: "form").find { |f| f.attribute("action").to_s.end_with?("/queues/#{parked}") }
    end
    press(form.find_element(css: "input[name=delete]"), "the queue deleted") { Sidekiq::Queue.new(parked).size.zero? }
    held.each { |_jid, d| wait_for("its lock freed") { client.locked_by(d).empty? } }
  end

  # Sidekiq 8's Scheduled page has Delete All and Add All to Queue (6.4 and 7.3 have neither).
  def test_delete_all_and_add_all_to_queue_on_the_scheduled_page
    skip "Sidekiq #{Sidekiq::VERSION} has no Delete All on its Scheduled page" if Sidekiq::VERSION.to_i < 8

    jid, digest = push(in: 3600)
    visit("/scheduled")
    press(all_button("scheduled/all/add_to_queue"), "the job queued") { queue_jids(parked).include?(jid) }
    assert_equal [jid], client.locked_by(digest), "Add All to Queue keeps the lock"

    jid, digest = push("#{token}-2", in: 3600)
    visit("/scheduled")
    press(all_button("scheduled/all/delete"), "the job deleted") { Sidekiq::ScheduledSet.new.find_job(jid).nil? }
    wait_for("its lock freed") { client.locked_by(digest).empty? }
  end
end
