// FNV-1a-64 of 32-bit values as little-endian bytes, as 16 hex digits: the hash the fixture
// scripts print and tests/data/fnv.h computes.
'use strict';
module.exports = function fnv1a64(values) {
  let h = 0xcbf29ce484222325n;
  for (const v of values)
    for (let k = 0; k < 4; ++k) {
      h ^= BigInt((v >>> (8 * k)) & 0xff);
      h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
    }
  return h.toString(16).padStart(16, '0');
};
