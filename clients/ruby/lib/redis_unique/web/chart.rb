# frozen_string_literal: true

module RedisUnique
  module Web
    # A small line chart drawn on the server as inline SVG (nothing loaded from
    # elsewhere, no script): one polyline per series, minutes on the x axis.
    class Chart
      COLORS = { "acquired" => "#2e7d32", "denied" => "#c62828", "released" => "#1565c0",
                 "expired" => "#ef6c00", "reaped" => "#6a1b9a", "waited" => "#00838f",
                 "timed_out" => "#5d4037" }.freeze
      WIDTH = 640
      HEIGHT = 180
      PAD = 30

      # series: { name => [value per minute, oldest first] }
      def initialize(series, title:)
        @series = series
        @title = title
      end

      def max
        [@series.values.flatten.max.to_i, 1].max
      end

      def to_svg
        n = [@series.values.map(&:size).max.to_i, 2].max
        x = ->(i) { PAD + (i * (WIDTH - 2 * PAD) / (n - 1).to_f).round(1) }
        y = ->(v) { (HEIGHT - PAD - v * (HEIGHT - 2 * PAD) / max.to_f).round(1) }
        lines = @series.map do |name, values|
          points = values.each_with_index.map { |v, i| "#{x.call(i)},#{y.call(v)}" }.join(" ")
          %(<polyline class="series" data-series="#{esc(name)}" fill="none" stroke="#{COLORS.fetch(name, "#555")}" ) +
            %(stroke-width="2" points="#{points}"><title>#{esc(name)}</title></polyline>)
        end
        legend = @series.keys.each_with_index.map do |name, i|
          lx = PAD + i * 85
          %(<rect x="#{lx}" y="4" width="10" height="10" fill="#{COLORS.fetch(name, "#555")}"/>) +
            %(<text x="#{lx + 14}" y="13" font-size="11" fill="currentColor">#{esc(name)}</text>)
        end
        <<~SVG
          <svg xmlns="http://www.w3.org/2000/svg" class="redis-unique-chart" role="img" width="#{WIDTH}" height="#{HEIGHT}" viewBox="0 0 #{WIDTH} #{HEIGHT}">
          <title>#{esc(@title)}</title>
          <line x1="#{PAD}" y1="#{HEIGHT - PAD}" x2="#{WIDTH - PAD}" y2="#{HEIGHT - PAD}" stroke="#999"/>
          <line x1="#{PAD}" y1="#{PAD}" x2="#{PAD}" y2="#{HEIGHT - PAD}" stroke="#999"/>
          <text x="2" y="#{PAD + 4}" font-size="10" fill="currentColor">#{max}</text>
          <text x="2" y="#{HEIGHT - PAD + 4}" font-size="10" fill="currentColor">0</text>
          <text x="#{PAD}" y="#{HEIGHT - 8}" font-size="10" fill="currentColor">-#{n} min</text>
          <text x="#{WIDTH - PAD - 20}" y="#{HEIGHT - 8}" font-size="10" fill="currentColor">now</text>
          #{legend.join("\n")}
          #{lines.join("\n")}
          </svg>
        SVG
      end

      private

      def esc(text)
        ::Rack::Utils.escape_html(text.to_s)
      end
    end
  end
end
