# frozen_string_literal: true

module RedisUnique
  # The module-version check: at its first command, a Connection asks MODULE LIST which
  # version of the module is loaded and refuses another major.minor than the gem's (a patch
  # release of either side changes no reply). MODULE LIST's `ver` is
  # major * 10000 + minor * 100 + patch (0.1.0 is 100). A server that refuses MODULE LIST
  # (an ACL without it, a proxy) is not checked; a missing module is left to the command.
  module ModuleVersion
    class << self
      # The module version the gem was made for: its own (tests set another).
      attr_writer :built_for

      def built_for
        @built_for || VERSION
      end

      # MODULE LIST's ver as "MAJOR.MINOR.PATCH" (20601 -> "2.6.1").
      def decode(ver)
        ver = Integer(ver)
        "#{ver / 10_000}.#{ver / 100 % 100}.#{ver % 100}"
      end

      # The ver of the module named "unique" in a MODULE LIST reply (RESP2 pairs or RESP3
      # maps), nil when it is not there.
      def loaded(reply)
        Array(reply).each do |entry|
          fields = entry.is_a?(Hash) ? entry : Hash[*Array(entry).first(Array(entry).size / 2 * 2)]
          fields = fields.to_h { |k, v| [k.to_s, v] }
          return Integer(fields["ver"].to_s) if fields["name"].to_s == "unique"
        end
        nil
      end

      # The error for a loaded module of `ver`, nil when it is the gem's major.minor.
      def mismatch(ver)
        major, minor = built_for.split(".").first(2).map(&:to_i)
        return nil if [ver / 10_000, ver / 100 % 100] == [major, minor]

        ModuleVersionMismatch.new(decode(ver), built_for)
      end
    end
  end
end
