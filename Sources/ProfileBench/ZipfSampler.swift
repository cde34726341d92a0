import Glibc

/// Draws ranks 1...n with probability proportional to 1/rank^s, in constant time and memory
/// whatever n is: Hörmann and Derflinger's rejection-inversion method ("Rejection-inversion
/// to generate variates from monotone discrete distributions", 1996), as Apache Commons
/// RNG implements it.
///
/// A value type; any thread may use its own copy.
public struct ZipfSampler: Sendable {
    public let count: Int
    public let exponent: Double
    private let hIntegralX1: Double
    private let hIntegralCount: Double
    private let sTest: Double

    /// - Parameters:
    ///   - count: the number of ranks, at least 1.
    ///   - exponent: s, greater than 0 (1 is classic Zipf; 0.99 is YCSB's default).
    public init(count: Int, exponent: Double) {
        precondition(count >= 1 && exponent > 0)
        self.count = count
        self.exponent = exponent
        hIntegralX1 = Self.hIntegral(1.5, exponent) - 1
        hIntegralCount = Self.hIntegral(Double(count) + 0.5, exponent)
        sTest = 2 - Self.hIntegralInverse(Self.hIntegral(2.5, exponent) - Self.h(2, exponent), exponent)
    }

    /// A rank in 1...count.
    public func next(using random: inout RandomSource) -> Int {
        while true {
            let u = hIntegralCount + random.unit() * (hIntegralX1 - hIntegralCount)
            let x = Self.hIntegralInverse(u, exponent)
            var k = Int(x + 0.5)
            if k < 1 { k = 1 } else if k > count { k = count }
            let kd = Double(k)
            if kd - x <= sTest || u >= Self.hIntegral(kd + 0.5, exponent) - Self.h(kd, exponent) {
                return k
            }
        }
    }

    private static func h(_ x: Double, _ s: Double) -> Double { exp(-s * log(x)) }

    /// The integral of h from 1 to x: (x^(1-s) - 1) / (1-s), stable near s = 1.
    private static func hIntegral(_ x: Double, _ s: Double) -> Double {
        let logX = log(x)
        return helper2((1 - s) * logX) * logX
    }

    private static func hIntegralInverse(_ x: Double, _ s: Double) -> Double {
        var t = x * (1 - s)
        if t < -1 { t = -1 }
        return exp(helper1(t) * x)
    }

    /// log(1 + x) / x, with its series near 0.
    private static func helper1(_ x: Double) -> Double {
        abs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x))
    }

    /// (e^x - 1) / x, with its series near 0.
    private static func helper2(_ x: Double) -> Double {
        abs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x))
    }
}
