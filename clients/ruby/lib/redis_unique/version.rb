# frozen_string_literal: true

module RedisUnique
  VERSION = "0.1.0"
end
