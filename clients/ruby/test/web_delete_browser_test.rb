# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/browser"

# Sidekiq's own web pages in a real browser (headless Chromium): pressing Delete on a
# queued job (a queue's page, with its confirmation dialog) and on a scheduled job (its
# page) frees the job's lock, so that the same job can be pushed again.
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
    Sidekiq::ScheduledSet.new.select { |e| e.args.first == token }.each(&:delete)
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

  def push(**opts)
    setter = UntilExecutedDefaultJob.set(queue: parked)
    jid = opts[:in] ? setter.perform_in(opts[:in], token) : setter.perform_async(token)
    digest = digest_of(UntilExecutedDefaultJob, token, queue: parked)
    assert_equal [jid], client.locked_by(digest)
    [jid, digest]
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
end
