# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/browser"

# The Locks tab in a real browser: headless Chromium opens the Sidekiq web app served over
# HTTP, finds a lock this test took, opens it, reads its holder, presses Unlock (a
# confirmation dialog: dismissed first, then accepted) and sees it gone; a key, jid, owner
# and META full of markup render as text. Screenshots of each page go to a temporary
# directory, printed at the start.
class WebBrowserTest < Minitest::Test
  include TestHelpers

  class << self
    def shots
      @shots ||= Dir.mktmpdir("redis-unique-web-screenshots").tap do |dir|
        puts "\nweb screenshots (Sidekiq #{Sidekiq::VERSION}): #{dir}"
      end
    end

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

  def visit(path)
    browser.navigate.to(self.class.http.url(path))
  end

  def shot(name)
    path = File.join(self.class.shots, "#{Sidekiq::VERSION}-#{name}.png")
    browser.save_screenshot(path)
    assert_operator File.size(path), :>, 1000, "a screenshot in #{path}"
  end

  def css(selector)
    browser.find_element(css: selector)
  end

  def csses(selector)
    browser.find_elements(css: selector)
  end

  # Clicks `element` as a user would: scrolled to the middle of the window first, so that a
  # long page (many owners, from other tests' Sidekiq processes) cannot leave it under
  # Sidekiq 8's fixed navigation bar.
  def click(element)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click
  end

  def wait_for(message = "the page", &block)
    wait_until(interval: 0.05, message: message) do
      block.call
    rescue Selenium::WebDriver::Error::NoSuchElementError, Selenium::WebDriver::Error::StaleElementReferenceError
      nil
    end
  end

  # The link to `key` in the filtered Locks list, following "Next step" until a step of
  # the SCAN shows it: one page is one SCAN step, and in the suite's shared database a
  # step can come back without the key.
  def lock_link(key)
    200.times do
      step = wait_for("a step of the list") { css("#redis-unique-locks-table, #redis-unique-next") && browser.current_url }
      links = csses("#redis-unique-locks-table td.key a")
      found = links.find { |l| l.text == key }
      if found
        assert_equal [key], links.map(&:text), "the pattern keeps only this test's lock"
        return found
      end
      following = csses("#redis-unique-next").first
      flunk "no step of the list shows #{key}" unless following
      click(following)
      wait_for("the next step") { browser.current_url != step }
    end
    flunk "200 steps and no #{key}"
  end

  def alert
    wait_for("the confirmation dialog") do
      browser.switch_to.alert
    rescue Selenium::WebDriver::Error::NoSuchAlertError
      nil
    end
  end

  def test_find_a_lock_open_it_and_unlock_its_holder
    key = "browser:#{token}"
    meta = { "class" => "BrowserJob", "note" => "meta-#{token}" }
    tok = client.lock(key, "jid-#{token}", ttl: 600, type: "until_executed", owner: "host:1:abc", meta: meta)
    client.lock("browser:other:#{token}", "other", ttl: 600)

    visit("/locks")
    assert_equal "Locks", css("li.active a").text, "the Locks tab is the active one"
    field = css("input[name=pattern]")
    field.send_keys("browser:#{token}*")
    field.submit
    wait_for("the filtered list") { browser.current_url.include?("pattern=") }
    link = lock_link(key)
    shot("locks")
    click(link)

    wait_for("the lock page") { css("#redis-unique-holders") }
    assert_equal key, css("h3 code.key").text
    assert_equal "jid-#{token}", css("tr.holder code.jid").text
    assert_equal tok.to_s, css("tr.holder code.token").text
    assert_equal JSON.pretty_generate(meta), css("tr.holder pre.meta").text
    assert_equal "host:1:abc", css("tr.holder td.owner").text
    shot("lock")

    click(css("tr.holder input.unlock"))
    dialog = alert
    assert_includes dialog.text, "Remove jid-#{token} from this lock?"
    dialog.dismiss
    assert_equal ["jid-#{token}"], client.locked_by(key), "dismissed: nothing sent"

    click(css("tr.holder input.unlock"))
    alert.accept
    wait_for("the holder gone") { css("#redis-unique-free") }
    assert_equal "The holder was removed.", css("#redis-unique-notice").text
    assert_empty csses("tr.holder")
    assert_empty client.locked_by(key)
    shot("unlocked")
  end

  def group_rows
    csses("#redis-unique-groups tr.group-row").map do |row|
      %w[group holding waiting].map { |c| row.find_element(css: "td.#{c}").text }
    end
  end

  # A lock shared by tenants: the page shows holding and waiting per group, and each
  # holder's group and mode; unlocking a holder on the page serves the group's waiter.
  def test_a_lock_with_groups_shows_each_groups_holding_and_waiting
    key = "browser:groups:#{token}"
    opts = { limit: 3, group_limit: 2, ttl: 600 }
    client.lock(key, "acme-1", group: "acme", **opts)
    client.lock(key, "acme-2", group: "acme", mode: :shared, **opts)
    client.lock(key, "globex-1", group: "globex", **opts)
    waiters = %w[acme-3 acme-4].map do |jid|
      Thread.new { RedisUnique::Client.new(TestSuite.raw_connection).lock(key, jid, group: "acme", wait: 30, **opts) }
    end
    wait_until(message: "two waiters of acme") { client.waiters(key) == 2 }

    visit("/locks/lock?key=#{CGI.escape(key)}")
    wait_for("the groups") { css("#redis-unique-groups") }
    assert_equal [%w[acme 2 2], %w[globex 1 0]], group_rows
    holders = csses("tr.holder").map do |row|
      %w[code.jid td.group td.mode].map { |c| row.find_element(css: c).text }
    end
    assert_equal [%w[acme-1 acme —], %w[acme-2 acme shared], %w[globex-1 globex —]], holders
    assert_equal "2", css("#redis-unique-waiting").text
    shot("groups")

    row = csses("tr.holder").find { |r| r.find_element(css: "code.jid").text == "acme-1" }
    click(row.find_element(css: "input.unlock"))
    alert.accept
    wait_for("the holder removed") { css("#redis-unique-notice") }
    served = wait_until(message: "a waiter of acme served") { waiters.find { |t| !t.alive? } }
    assert_kind_of Integer, served.value, "a waiter of acme took the freed slot"
    visit("/locks/lock?key=#{CGI.escape(key)}")
    wait_for("the groups again") { group_rows == [%w[acme 2 1], %w[globex 1 0]] }
    client.unlock(key, "acme-2")
    waiters.each { |t| assert_kind_of Integer, t.value }
  end

  def test_markup_in_a_lock_renders_as_text
    key = %(xss:#{token}:<script>window.__xss=1</script>)
    jid = %(<img src=x onerror="window.__xss=2">)
    owner = %("><script>window.__xss=3</script>)
    note = %(</pre><script>window.__xss=4</script>)
    client.lock(key, jid, ttl: 600, type: "xss", owner: owner, meta: { "note" => note })

    visit("/locks?pattern=#{CGI.escape("xss:#{token}:*")}")
    link = lock_link(key)
    click(link)
    wait_for("its page") { css("#redis-unique-holders") }
    assert_equal key, css("h3 code.key").text
    assert_equal jid, css("tr.holder code.jid").text
    assert_equal owner, css("tr.holder td.owner").text
    assert_equal JSON.pretty_generate({ "note" => note }), css("tr.holder pre.meta").text
    assert_nil browser.execute_script("return window.__xss"), "no markup of the data ran"
    assert_empty csses("#redis-unique-holders img"), "no element made of the data"
    shot("xss")
  end

  def test_owners_and_metrics_pages
    dead = "deadhost:#{900_000 + rand(90_000)}:#{SecureRandom.hex(6)}"
    client.lock("browser:owned:#{token}", "j", ttl: 600, type: "until_executed", owner: dead)
    visit("/locks/owners")
    row = wait_for("the dead owner's row") do
      csses("tr.owner-row").find { |r| r.find_element(css: "code.owner").text == dead }
    end
    assert_includes row.text, "dead"
    shot("owners")
    click(row.find_element(css: "input[type=submit]"))
    assert_includes alert.text, "Free every lock held by #{dead}?"
    alert.accept
    wait_for("the notice") { css("#redis-unique-notice").text.include?("freed") }
    assert_empty client.locked_by("browser:owned:#{token}")

    visit("/locks/metrics")
    chart = wait_for("the chart") { css("svg.redis-unique-chart") }
    assert chart.displayed?
    assert_operator csses("svg.redis-unique-chart polyline").size, :>=, 4
    assert_operator css("#redis-unique-metrics-table tr[data-type=total] th[data-counter=acquired]").text.delete(",").to_i, :>=, 1
    shot("metrics")
  end
end
