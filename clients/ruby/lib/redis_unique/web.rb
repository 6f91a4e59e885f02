# frozen_string_literal: true

require "sidekiq"
require "sidekiq/web"
require_relative "../redis_unique"
require_relative "web/store"
require_relative "web/chart"
require_relative "web/helpers"

module RedisUnique
  # The "Locks" tab of Sidekiq's web UI:
  #
  #   require "sidekiq/web"
  #   require "redis_unique/web"
  #   mount Sidekiq::Web => "/sidekiq"        # (Rails) or run Sidekiq::Web (Rack)
  #
  # Pages: locks/ (one SCAN step per request), locks/lock?key=..., locks/owners,
  # locks/metrics. Actions (POST, Sidekiq's CSRF token): unlock a holder, delete a lock,
  # free the locks of a dead owner.
  module Web
    ROOT = File.expand_path("web", __dir__)
    VIEWS = File.join(ROOT, "views")
    OWNERS_KEY = "redis_unique:owners" # RedisUnique::Sidekiq::OWNERS_KEY, without loading the middlewares
    MAX_COUNT = 1000

    class << self
      # The Redis the pages read (default: Sidekiq's own pool).
      attr_writer :redis
      # SCAN COUNT of a Locks page (a request may ask for up to MAX_COUNT with ?count=).
      attr_accessor :scan_count
      # The Owners page stops counting after this many lock keys.
      attr_accessor :owner_scan_limit
      # A job's queue is searched for its jid only up to this length.
      attr_accessor :queue_search_limit
      # A lock page looks up the jobs of this many holders in Sidekiq (a counting lock
      # may have thousands).
      attr_accessor :job_lookup_limit

      def redis
        @redis || ::Sidekiq.redis_pool
      end

      def store
        Store.new(redis)
      end

      def template(name)
        @templates ||= {}
        @templates[name] ||= File.read(File.join(VIEWS, "#{name}.erb")).freeze
      end

      def confirm_js
        @confirm_js ||= File.read(File.join(ROOT, "assets", "confirm.js")).freeze
      end

      def registered(app)
        app.helpers(Helpers)

        app.get("/locks") do
          ru_render(:locks) do
            count = (ru_param(:count) || RedisUnique::Web.scan_count).to_i.clamp(1, RedisUnique::Web::MAX_COUNT)
            cursor = ru_param(:cursor).to_s
            cursor = "0" unless cursor.match?(/\A\d+\z/)
            @ru_page = ru_store.page(cursor: cursor, pattern: ru_param(:pattern), count: count)
          end
        end

        app.get("/locks/lock") do
          ru_render(:lock) do
            @ru_key = ru_param(:key).to_s
            @ru_holders = @ru_key.empty? ? [] : ru_store.holders(@ru_key)
            @ru_waiters = @ru_key.empty? ? 0 : ru_store.waiters(@ru_key)
            @ru_groups = @ru_key.empty? ? [] : ru_store.groups(@ru_key)
            @ru_rate = @ru_key.empty? ? nil : ru_store.rate(@ru_key)
          end
        end

        app.get("/locks/owners") do
          ru_render(:owners) do
            @ru_owners = ru_store.owners(live: ru_live_identities, registered: ru_registered_owners,
                                         limit: RedisUnique::Web.owner_scan_limit)
          end
        end

        app.get("/locks/metrics") do
          ru_render(:metrics) do
            @ru_metrics = ru_store.metrics
            @ru_type = @ru_metrics["series"].key?(ru_param(:type)) ? ru_param(:type) : "total"
          end
        end

        app.get("/locks/confirm.js") do
          [200, { "Content-Type" => "application/javascript", "Cache-Control" => "private, max-age=3600" },
           [RedisUnique::Web.confirm_js]]
        end

        app.post("/locks/unlock") do
          ru_action do
            key = ru_param(:key).to_s
            removed = ru_store.unlock(key, ru_param(:jid).to_s)
            ru_redirect("locks/lock", key: key, notice: removed ? "unlocked" : "not_held")
          end
        end

        app.post("/locks/delete") do
          ru_action do
            deleted = ru_store.delete(ru_param(:key).to_s)
            ru_redirect("locks", notice: deleted ? "deleted" : "not_deleted")
          end
        end

        app.post("/locks/owners/free") do
          ru_action do
            owner = ru_param(:owner).to_s
            if Store.status(owner, ru_live_identities) == :dead
              n = ru_store.free_owner(owner)
              ru_redirect("locks/owners", notice: "freed", freed: n, owner: owner)
            else
              ru_redirect("locks/owners", notice: "not_dead", owner: owner)
            end
          end
        end
      end

      # Adds the tab to Sidekiq::Web (called when this file is required).
      def register!
        return if @registered

        @registered = true
        if ::Sidekiq::Web.respond_to?(:configure) && ::Sidekiq::VERSION.to_i >= 8
          # Sidekiq 8 (untested: it needs Ruby 3.2): the documented API.
          ::Sidekiq::Web.configure do |config|
            config.register(self, name: "redis_unique", tab: "Locks", index: "locks", root_dir: ROOT)
          end
        elsif ::Sidekiq::VERSION.to_i >= 7
          ::Sidekiq::Web.register(self, name: "redis_unique", tab: "Locks", index: "locks", root_dir: ROOT)
        else
          ::Sidekiq::Web.register(self)
          ::Sidekiq::Web.tabs["Locks"] = "locks"
          ::Sidekiq::Web.locales << File.join(ROOT, "locales")
        end
      end
    end

    self.scan_count = 100
    self.owner_scan_limit = 10_000
    self.queue_search_limit = 10_000
    self.job_lookup_limit = 50
  end
end

RedisUnique::Web.register!
