# frozen_string_literal: true

require "securerandom"
require "rack"
require "rack/session/cookie"
require "redis_unique/web"

module RedisUnique
  # The Sidekiq web app with the Locks tab, as an application mounts it (a cookie session
  # for Sidekiq's CSRF protection), for rack-test and for a real HTTP server.
  module WebSupport
    SECRET = SecureRandom.hex(64)

    module_function

    def app
      @app ||= Rack::Builder.new do
        use Rack::Session::Cookie, secret: SECRET, same_site: true, max_age: 86_400
        run ::Sidekiq::Web
      end
    end

    # Sidekiq's CSRF token in a page (the hidden authenticity_token field).
    def csrf_token(html)
      html[/name=['"]authenticity_token['"] value=['"]([^'"]+)['"]/, 1] or raise "no CSRF token in the page"
    end
  end
end
