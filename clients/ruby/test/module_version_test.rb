# frozen_string_literal: true

require_relative "test_helper"

# The module-version check: the real module (its version is the gem's) meets a gem told
# it was made for another version, and refuses it at the first command.
class ModuleVersionTest < Minitest::Test
  include TestHelpers

  def teardown
    RedisUnique::ModuleVersion.built_for = nil
  end

  def key
    "k:#{token}"
  end

  def loaded
    RedisUnique::ModuleVersion.decode(RedisUnique::ModuleVersion.loaded(conn.call("MODULE", "LIST")))
  end

  def other_minor(version)
    major, minor, = version.split(".")
    "#{major}.#{minor.to_i + 1}.0"
  end

  def test_the_module_reports_the_gems_version
    assert_equal RedisUnique::VERSION, loaded
    assert_equal "2.6.1", RedisUnique::ModuleVersion.decode(20_601)
  end

  def test_a_module_of_another_minor_is_refused_at_the_first_command
    module_version = loaded
    RedisUnique::ModuleVersion.built_for = other_minor(module_version)
    c = RedisUnique::Client.new(TestSuite.raw_connection)
    e = assert_raises(RedisUnique::ModuleVersionMismatch) { c.lock(key, "a", ttl: 30) }
    assert_includes e.message, module_version
    assert_includes e.message, other_minor(module_version)
    assert_includes e.message, "gem \"redis-unique\""
    assert_equal [module_version, other_minor(module_version)], [e.module_version, e.client_version]
    assert_equal 0, conn.call("EXISTS", key) # never sent
  end

  def test_another_patch_release_is_accepted
    major, minor, patch = loaded.split(".")
    RedisUnique::ModuleVersion.built_for = "#{major}.#{minor}.#{patch.to_i + 1}"
    c = RedisUnique::Client.new(TestSuite.raw_connection)
    refute_nil c.lock(key, "a", ttl: 30)
  ensure
    conn.call("DEL", key)
  end

  def test_a_user_without_module_list_is_not_checked
    RedisUnique::ModuleVersion.built_for = other_minor(loaded)
    user = "no-module-list-#{token}"
    conn.call("ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "-module")
    url = TestSuite.url.sub("redis://", "redis://#{user}:pw@")
    c = RedisUnique::Client.new(TestSuite.raw_connection(url))
    refute_nil c.lock(key, "a", ttl: 30)
  ensure
    conn.call("ACL", "DELUSER", user)
    conn.call("DEL", key)
  end
end
