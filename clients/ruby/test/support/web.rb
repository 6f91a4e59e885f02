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

    # How this Sidekiq refuses a cross-site POST. 6 and 7: a token kept in the session
    # and put in every form. 8.1: no token; the browser's Sec-Fetch-Site header must say
    # `same-origin`, and a POST without it is refused too.
    def fetch_metadata_protection?
      Gem::Version.new(::Sidekiq::VERSION) >= Gem::Version.new("8.1")
    end

    # The params and Rack env of a POST that a browser makes from `page` (the HTML of a
    # page of the app, where the form is).
    def same_origin(params, page)
      if fetch_metadata_protection?
        [params, { "HTTP_SEC_FETCH_SITE" => "same-origin" }]
      else
        [params.merge("authenticity_token" => csrf_token(page)), {}]
      end
    end

    # The ways another site's page could POST to the app, each to be refused: a browser
    # says `cross-site` (or `same-site`, a sibling subdomain) or nothing (an old browser, a
    # script); on 6 and 7, with no token or a forged one.
    def cross_site_attempts(params)
      if fetch_metadata_protection?
        [[params, { "HTTP_SEC_FETCH_SITE" => "cross-site" }],
         [params, { "HTTP_SEC_FETCH_SITE" => "same-site" }],
         [params, {}]]
      else
        [[params, { "HTTP_SEC_FETCH_SITE" => "cross-site" }],
         [params.merge("authenticity_token" => "forged"), {}]]
      end
    end
  end
end
