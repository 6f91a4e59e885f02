# frozen_string_literal: true

require "erb"
require "json"
require "uri"

module RedisUnique
  module Web
    # Methods of the pages (mixed into Sidekiq's WebAction; prefixed ru_ so they never
    # shadow Sidekiq's own helpers).
    module Helpers
      NOTICES = {
        "unlocked" => "The holder was removed.",
        "not_held" => "That job no longer held the lock: nothing was removed.",
        "deleted" => "The lock was deleted.",
        "not_deleted" => "No lock by that name: nothing was deleted.",
        "freed" => "The owner's locks were freed.",
        "not_dead" => "That owner is not a dead Sidekiq process: nothing was freed."
      }.freeze

      def ru_store
        @ru_store ||= RedisUnique::Web.store
      end

      # Renders the page `name` (after the block has loaded its data), or the page that
      # says the module is not loaded.
      def ru_render(name)
        raise RedisUnique::ModuleNotLoaded unless ru_store.module_loaded?

        yield if block_given?
        erb(RedisUnique::Web.template(name))
      rescue RedisUnique::ModuleNotLoaded => e
        @ru_error = e
        erb(RedisUnique::Web.template(:not_loaded))
      end

      # Runs an action (POST); without the module, back to the Locks page that says so.
      def ru_action
        yield
      rescue RedisUnique::ModuleNotLoaded
        ru_redirect("locks")
      end

      def ru_param(name)
        value = request.params[name.to_s]
        value.is_a?(String) ? value : nil
      end

      def ru_h(text)
        ::Rack::Utils.escape_html(text.to_s)
      end

      def ru_nonce_attr
        nonce = env[:csp_nonce].to_s
        nonce.match?(%r{\A[A-Za-z0-9+/=_-]+\z}) ? %( nonce="#{nonce}") : ""
      end

      def ru_path(path, query = {})
        query = query.compact.reject { |_, v| v.to_s.empty? }
        "#{root_path}#{path}#{query.empty? ? "" : "?#{URI.encode_www_form(query)}"}"
      end

      def ru_lock_path(key)
        ru_path("locks/lock", key: key)
      end

      def ru_redirect(path, query = {})
        redirect(ru_path(path, query))
      end

      def ru_notice
        NOTICES[ru_param(:notice)]
      end

      def ru_time(time)
        time ? time.utc.strftime("%Y-%m-%d %H:%M:%S UTC") : "never"
      end

      # "1h 02m 03s", "4.2s", or "no lease".
      def ru_left(seconds)
        return "no lease" if seconds.nil?
        return format("%.1fs", seconds) if seconds < 60

        s = seconds.round
        h, s = s.divmod(3600)
        m, s = s.divmod(60)
        h.positive? ? format("%dh %02dm %02ds", h, m, s) : format("%dm %02ds", m, s)
      end

      def ru_meta(meta)
        return "" if meta.respond_to?(:empty?) && meta.empty?

        meta.is_a?(Hash) ? JSON.pretty_generate(meta) : meta.to_s
      end

      def ru_live_identities
        @ru_live_identities ||= ::Sidekiq::ProcessSet.new(false).map { |p| p["identity"] }
      end

      def ru_registered_owners
        ru_store.connection.call("ZRANGE", RedisUnique::Web::OWNERS_KEY, 0, 999)
      end

      # [label, path] of where Sidekiq still has the job `jid`, or nil.
      def ru_job_location(jid, meta)
        queue = meta.is_a?(Hash) ? meta["queue"] : nil
        return ["running", "busy"] if ru_running_jids.include?(jid)

        if queue.is_a?(String) && !queue.empty?
          q = ::Sidekiq::Queue.new(queue)
          if q.size <= RedisUnique::Web.queue_search_limit && q.find_job(jid)
            return ["in queue #{queue}", "queues/#{ERB::Util.url_encode(queue)}"]
          end
        end
        { "scheduled" => [::Sidekiq::ScheduledSet, "scheduled"], "retry" => [::Sidekiq::RetrySet, "retries"],
          "dead" => [::Sidekiq::DeadSet, "morgue"] }.each do |label, (klass, path)|
          entry = klass.new.find_job(jid)
          return [label, "#{path}/#{ERB::Util.url_encode("#{entry.score}-#{entry.jid}")}"] if entry
        end
        nil
      end

      def ru_running_jids
        @ru_running_jids ||= begin
          set = defined?(::Sidekiq::WorkSet) ? ::Sidekiq::WorkSet.new : ::Sidekiq::Workers.new
          set.map do |_process, _tid, work|
            payload = work.respond_to?(:payload) ? work.payload : work["payload"]
            payload = JSON.parse(payload) if payload.is_a?(String)
            payload.is_a?(Hash) ? payload["jid"] : nil
          end.compact
        end
      end

      # A rate's period: "second", "minute", "hour", "day", else "250 ms" or "1.5 s".
      def ru_per(ms)
        named = { 1_000 => "second", 60_000 => "minute", 3_600_000 => "hour", 86_400_000 => "day" }[ms]
        named || (ms < 1000 ? "#{ms} ms" : "#{(ms / 1000.0).round(3)} s")
      end

      def ru_number(value)
        value.to_i.to_s.reverse.scan(/\d{1,3}/).join(",").reverse.then { |s| value.to_i.negative? ? "-#{s}" : s }
      end
    end
  end
end
