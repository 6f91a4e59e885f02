# frozen_string_literal: true

require_relative "test_helper"
require "open3"
require "tmpdir"

# `gem build` makes an installable gem that works from its installed copy.
class GemBuildTest < Minitest::Test
  def test_gem_builds_installs_and_loads
    Dir.mktmpdir do |dir|
      out, st = Open3.capture2e("gem", "build", File.join(RedisUnique::Harness::RUBY_DIR, "redis-unique.gemspec"),
                                "--output", File.join(dir, "redis-unique.gem"), chdir: RedisUnique::Harness::RUBY_DIR)
      assert st.success?, out
      out, st = Open3.capture2e("gem", "install", "--local", "--ignore-dependencies", "--no-document",
                                "--install-dir", File.join(dir, "gems"), File.join(dir, "redis-unique.gem"))
      assert st.success?, out
      installed = Dir[File.join(dir, "gems/gems/redis-unique-*/lib")].first
      assert installed, "installed lib dir"
      assert File.exist?(File.join(dir, "gems/gems/redis-unique-#{RedisUnique::VERSION}/bin/redis-unique-migrate"))
      # the Functions library and its command ship in the gem
      assert_equal File.binread(File.join(RedisUnique::Harness::ROOT, "functions/redis_unique.lua")),
                   File.binread(File.join(installed, "redis_unique/redis_unique.lua"))
      bin = File.join(dir, "gems/gems/redis-unique-#{RedisUnique::VERSION}/bin/redis-unique")
      out, st = Open3.capture2e({ "RUBYLIB" => ENV["RUBYLIB"].to_s }, RbConfig.ruby, bin, "functions", "source")
      assert st.success?, out
      assert out.start_with?("#!lua name=redis_unique\n"), out[0, 200]
      script = 'require "redis_unique/sidekiq"; print RedisUnique::VERSION, " ", ' \
               'RedisUnique::Client.new(ENV.fetch("REDIS_URL") =~ /./ && (defined?(RedisClient) ? RedisClient.config(url: ENV["REDIS_URL"]).new_client : (require "redis"; Redis.new(url: ENV["REDIS_URL"])))).lock("gem:k", "j").class, " ", ' \
               '$LOADED_FEATURES.grep(/redis_unique\/client/).first'
      env = { "RUBYLIB" => [installed, ENV["RUBYLIB"]].compact.join(":"), "REDIS_URL" => TestSuite.url }
      out, st = Open3.capture2e(env, RbConfig.ruby, "-e", script)
      assert st.success?, out
      assert_match(/\A#{Regexp.escape(RedisUnique::VERSION)} Integer #{Regexp.escape(installed)}/, out)
    end
  end
end
