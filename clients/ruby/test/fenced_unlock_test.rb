# frozen_string_literal: true

require_relative "test_helper"

# The fenced unlock (Client#unlock(token:), #unlock_all(tokens:)) against a real server: an
# old token frees nothing of a newer hold of the same jid; the Refresher gives up a hold a late
# renewal took by that hold's token; a refused renewal of several keys releases the keys still
# held at once, by their tokens; the Limiter releases by its own token.
class FencedUnlockTest < Minitest::Test
  include TestHelpers

  def key
    @key ||= "fenced:#{token}"
  end

  def keys
    @keys ||= ["{#{token}}:a", "{#{token}}:b"]
  end

  def teardown
    conn.call("DEL", key, *keys)
  end

  def test_an_old_token_frees_nothing_of_the_same_jids_new_hold
    old = client.lock(key, "job-4", ttl: 60)
    assert client.unlock(key, "job-4")
    new = client.lock(key, "job-4", ttl: 60) # the same jid again: a retried job
    assert_operator new, :>, old
    refute client.unlock(key, "job-4", token: old)
    assert_equal [new], client.holders(key).map(&:token)
    assert client.unlock(key, "job-4", token: new)
    assert_empty client.locked_by(key)
    [0, -1, 2**63, "1", 1.0].each do |bad|
      assert_raises(RedisUnique::InvalidOption, bad.inspect) { client.unlock(key, "job-4", token: bad) }
    end
  end

  def test_unlock_all_releases_each_key_whose_hold_has_its_token
    first = client.lock_all(keys, "j", ttl: 60)
    assert client.unlock(keys[1], "j")
    b = client.lock(keys[1], "j", ttl: 60)
    assert_equal 1, client.unlock_all(keys, "j", tokens: first) # a released, b's newer hold kept
    assert_equal [b], client.holders(keys[1]).map(&:token)
    assert_raises(RedisUnique::InvalidOption) { client.unlock_all(keys, "j", tokens: [b]) }
    assert_equal 1, client.unlock_all([keys[1]], "j", tokens: [b])
  end

  def test_a_late_renewal_gives_up_the_hold_it_took_by_its_token
    lost = []
    sent = RedisUnique::Refresher.now
    held = client.lock(key, "job-1", ttl: 1.5)
    refresher = RedisUnique::Refresher.new(client, key, "job-1", token: held, lease_ms: 1500, sent_at: sent,
                                                                 on_lost: lost.method(:push)).start
    conn.call("DEL", key) # nobody holds it: the next renewal is a new grant
    wait_until(timeout: 30, message: "the loss told") { lost.any? }
    wait_until(timeout: 30, message: "the new grant given up") { client.locked_by(key).empty? }
    refresher.stop
    assert_match(/another fencing token/, lost.first.message)
  end

  def test_the_release_of_a_taken_hold_names_the_token_the_renewal_replied
    held = client.lock(key, "job-1", ttl: 60)
    assert client.unlock(key, "job-1")
    newer = client.lock(key, "job-1", ttl: 60) # the same jid's newer hold
    refresher = RedisUnique::Refresher.new(client, key, "job-1", token: held, lease_ms: 60_000)
    refresher.send(:unlock, held) # a late give-up of the old hold's token
    assert_equal [newer], client.holders(key).map(&:token), "the newer hold is kept"
    refresher.send(:unlock, newer)
    assert_empty client.locked_by(key)
  end

  def test_a_refused_renewal_of_several_keys_releases_the_keys_still_held_at_once
    lost = []
    sent = RedisUnique::Refresher.now
    tokens = client.lock_all(keys, "job-1", ttl: 1.5)
    refresher = RedisUnique::Refresher.new(client, keys, "job-1", token: tokens, lease_ms: 1500, sent_at: sent,
                                                                  on_lost: lost.method(:push)).start
    assert client.unlock(keys[0], "job-1") # one key's hold ends: the next renewal is refused
    wait_until(timeout: 30, message: "the refusal told") { lost.any? }
    # Nothing stopped or released by the user: b is free long before its lease would end.
    wait_until(timeout: 30, message: "the other key released") { client.locked_by(keys[1]).empty? }
    refresher.stop
    assert_match(/another holder has it/, lost.first.message)
  end

  def test_a_limiter_releases_by_its_own_token_leaving_a_newer_hold_of_the_jid
    limiter = RedisUnique::Limiter.new(client, key, concurrency: 2, ttl: 60)
    newer = nil
    limiter.within("job-1") do
      assert client.unlock(key, "job-1")
      newer = client.lock(key, "job-1", limit: 2, ttl: 60) # the same jid's newer hold
    end
    assert_equal [newer], client.holders(key).map(&:token)
  end
end
