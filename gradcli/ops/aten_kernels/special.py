"""Special functions on the host in float64 with NumPy: lgamma, digamma, polygamma, erfc,
erfcx, ndtri and the modified Bessel functions i0, i0e, i1, i1e (NumPy has none of them, and
gradcli does not depend on SciPy).

Each takes a float array and gives the result in its dtype, computed in float64 and rounded
once. The algorithms are the ones PyTorch's CPU kernels run (``aten/src/ATen/native/Math.h``:
Cephes' digamma, trigamma, zeta, Chebyshev series and ndtri), followed step by step so that the
float64 results agree with PyTorch's to an ulp or so, poles, infinities and NaN included; lgamma
and erfc are libm's through Python's ``math`` (Note [erf on the host]); erfcx is
``exp(x^2) * erfc(x)`` with x^2 carried in two parts (Note [erfcx from erfc]).

The derivations from the Cephes Math Library follow Note [3-Clause BSD License for the Cephes
Math Library] in PyTorch's Math.h (Copyright (c) 2018, Steven Moshier; BSD-3-Clause).

>>> float(digamma(np.array(1.0)))
-0.5772156649015329
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["lgamma", "digamma", "polygamma", "erfc", "erfcx", "ndtri", "i0", "i0e", "i1", "i1e"]

_PI = math.pi


def _f64(x):
    x = np.asarray(x)
    return x, np.asarray(x, np.float64)


def _back(out, x):
    return np.asarray(out, np.float64).reshape(x.shape).astype(x.dtype, copy=False)


def _host_map(fn, flat):
    return np.fromiter(map(fn, flat.ravel().tolist()), np.float64, count=flat.size).reshape(flat.shape)


# -- lgamma, erfc: libm -------------------------------------------------------------------------------
def _libm_lgamma():
    """The C library's lgamma (what PyTorch's CPU kernel calls): Python's math.lgamma is its own
    Lanczos sum, good to 1e-15 absolute but not relative near lgamma's zeros at 1 and 2."""
    try:
        import ctypes  # noqa: PLC0415
        import ctypes.util  # noqa: PLC0415

        fn = ctypes.CDLL(ctypes.util.find_library("m") or None).lgamma
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
        return fn
    except (OSError, AttributeError, TypeError):
        return None


_LIBM_LGAMMA = _libm_lgamma()


def _lgamma1(v):
    if _LIBM_LGAMMA is not None:
        return _LIBM_LGAMMA(v)
    try:
        return math.lgamma(v)
    except (ValueError, OverflowError):      # the poles (0, -1, -2, ...) and overflow: +inf, as PyTorch
        return math.inf


def lgamma(x):
    """log|Gamma(x)|: +inf at the non-positive integers and at +-inf, as std::lgamma."""
    x, v = _f64(x)
    return _back(_host_map(_lgamma1, v), x)


def erfc(x):
    """1 - erf(x) without the cancellation (libm's erfc)."""
    x, v = _f64(x)
    return _back(_host_map(math.erfc, v), x)


# -- digamma, trigamma, polygamma (Cephes, as Math.h's calc_digamma, trigamma, zeta) ---------------
_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
              -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
              8.33333333333333333333E-2)


def _polevl(z, coeffs):
    out = np.zeros_like(z)
    for c in coeffs:
        out = out * z + c
    return out


def _digamma_positive(x):
    """calc_digamma for x > 0 (and +inf, NaN): shift x to >= 10, then the asymptotic series."""
    x = x.copy()
    result = np.zeros_like(x)
    while True:
        small = x < 10
        if not small.any():
            break
        result[small] -= 1 / x[small]
        x[small] += 1
    z = 1.0 / (x * x)
    y = np.where(x < 1.0e17, z * _polevl(z, _DIGAMMA_A), 0.0)
    out = result + np.log(x) - (0.5 / x) - y
    return np.where(x == 10, result + _PSI_10, out)


def _digamma64(v):
    with np.errstate(all="ignore"):
        out = np.empty_like(v)
        zero = v == 0
        neg = v < 0
        negint = neg & (v == np.trunc(v))
        reflect = neg & ~negint
        pos = ~(zero | neg)
        out[zero] = np.copysign(np.inf, -v[zero])          # digamma(+-0) = -+inf
        out[negint] = np.nan
        out[pos] = _digamma_positive(v[pos])
        r = np.modf(v[reflect])[0]                         # tan(pi * frac(x)): no error from pi * x
        out[reflect] = _digamma_positive(1 - v[reflect]) - _PI / np.tan(_PI * r)
    return out


def digamma(x):
    """psi(x) = d/dx lgamma(x): -inf at +0, +inf at -0, NaN at the negative integers (as PyTorch)."""
    x, v = _f64(x)
    return _back(_digamma64(v), x)


def _trigamma64(v):
    with np.errstate(all="ignore"):
        x = v.copy()
        sign = np.where(x < 0.5, -1.0, 1.0)
        result = np.zeros_like(x)
        low = x < 0.5
        s = np.sin(_PI * x[low])
        result[low] -= (_PI * _PI) / (s * s)
        x[low] = 1 - x[low]
        for _ in range(6):
            result += 1 / (x * x)
            x += 1
        ixx = 1 / (x * x)
        result += (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x
        return sign * result


_MACHEP = 1.11022302462515654042E-16
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)


# Cephes' direct sum steps q up by one until it passes 9: from q = -1e13 that is 1e13 steps (a
# hang in PyTorch). gradcli answers NaN below this instead (docs/deviations.md).
_ZETA_LOWEST_Q = -1.0e6


def _zeta64(x, q):
    """Hurwitz zeta(x, q) for a number x > 1 (Cephes' zeta: a direct sum, then Euler-Maclaurin)."""
    out = np.full_like(q, np.nan)
    with np.errstate(all="ignore"):
        pole = (q <= 0) & (q == np.floor(q))
        out[pole] = np.inf
        live = ~pole & ~(q < _ZETA_LOWEST_Q)
        if x != math.floor(x):
            live &= ~(q <= 0)                 # (NaN there; x is an integer for polygamma)
        qs = q[live]
        s = np.power(qs, -x)
        a = qs.copy()
        b = np.zeros_like(qs)
        done = np.zeros(qs.shape, bool)
        res = np.empty_like(qs)
        going = np.ones(qs.shape, bool)
        i = 0
        while going.any():
            i += 1
            a[going] += 1.0
            b[going] = np.power(a[going], -x)
            s[going] += b[going]
            conv = going & (-_MACHEP * s < b) & (b < _MACHEP * s)
            res[conv] = s[conv]
            done |= conv
            going &= ~conv & ((i < 9) | (a <= 9.0))
        rest = ~done
        w = a
        s = np.where(rest, s + b * w / (x - 1.0), s)
        s = np.where(rest, s - 0.5 * b, s)
        aa, k = 1.0, 0.0
        for j in range(12):
            aa *= x + k
            b = b / w
            t = aa * b / _ZETA_A[j]
            s = np.where(rest, s + t, s)
            conv = rest & (np.abs(t / s) < _MACHEP)
            res[conv] = s[conv]
            rest &= ~conv
            k += 1.0
            aa *= x + k
            b = b / w
            k += 1.0
        res[rest] = s[rest]
        out[live] = res
    return out


def polygamma(n, x):
    """The n-th derivative of digamma: digamma for n = 0, Math.h's trigamma for n = 1, and
    (-1)^(n+1) n! zeta(n + 1, x) beyond (calc_polygamma)."""
    x, v = _f64(x)
    if n == 0:
        return _back(_digamma64(v), x)
    if n == 1:
        return _back(_trigamma64(v), x)
    factor = (1.0 if n % 2 else -1.0) * math.exp(_lgamma1(n + 1.0))
    with np.errstate(all="ignore"):
        return _back(factor * _zeta64(float(n + 1), v), x)


# -- erfcx ---------------------------------------------------------------------------------------------
# Note [erfcx from erfc]: erfcx(x) = exp(x^2) erfc(x). libm's erfc keeps its relative precision
# until it underflows (x near 26.5), and exp(x^2) is exact to an ulp when x^2 is carried as the
# float64 product p plus its rounding error e (Veltkamp's split: exp(p) * (1 + e)). Beyond 26,
# where erfc has underflowed, the asymptotic series 1/(x sqrt(pi)) * sum (-1)^k (2k-1)!! / (2x^2)^k
# (its terms fall by at least 50 each from x = 26), and beyond 5e7 PyTorch's 1/(x sqrt(pi)).
# Below 0, PyTorch's formula: 2 exp(x*x) - erfcx(-x) (x*x rounded, as there), 2 exp(x*x) below
# -6.1 and +inf below -26.7.
_ISPI = 0.56418958354775628694807945156


def _exp_square(v):
    split = 134217729.0 * v                            # 2^27 + 1
    hi = split - (split - v)
    lo = v - hi
    p = v * v
    e = ((hi * hi - p) + 2 * hi * lo) + lo * lo
    return np.exp(p) * (1 + e)


def erfcx(x):
    """exp(x^2) * erfc(x), without overflow for large positive x."""
    x, v = _f64(x)
    with np.errstate(all="ignore"):
        near = (v >= 0) & (v < 26.0)
        out = np.empty_like(v)
        vn = v[near]
        out[near] = _exp_square(vn) * _host_map(math.erfc, vn)
        neg = v < 0
        vm = v[neg]
        twice = 2 * np.exp(vm * vm)
        mid = vm >= -6.1
        if mid.any():
            twice[mid] -= erfcx(-vm[mid])
        out[neg] = np.where(vm < -26.7, np.inf, twice)
        near |= neg
        far = v[~near]
        inv = 1.0 / (2.0 * far * far)
        series = np.ones_like(far)
        term = np.ones_like(far)
        for k in range(1, 12):
            term = term * (-(2 * k - 1) * inv)
            series = series + term
        far_out = np.where(far > 5e7, _ISPI / far, _ISPI / far * series)
        out[~near] = far_out
        out[np.isnan(v)] = np.nan
    return _back(out, x)


# -- ndtri (Cephes, as calc_ndtri) -------------------------------------------------------------------------
_S2PI = 2.50662827463100050242E0
_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0,
             8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
             -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1,
             4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
             -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0,
             1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
             3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9)
_EXP_M2 = 0.13533528323661269189


def ndtri(x):
    """The inverse of the standard normal CDF: -inf at 0, +inf at 1, NaN outside [0, 1]."""
    x, y0 = _f64(x)
    with np.errstate(all="ignore"):
        upper = y0 > 1 - _EXP_M2
        y = np.where(upper, 1 - y0, y0)
        yc = y - 0.5
        y2 = yc * yc
        central = (yc + yc * (y2 * _polevl(y2, _NDTRI_P0) / _polevl(y2, _NDTRI_Q0))) * _S2PI
        t = np.sqrt(-2.0 * np.log(y))
        x0 = t - np.log(t) / t
        z = 1.0 / t
        x1 = np.where(t < 8.0, z * _polevl(z, _NDTRI_P1) / _polevl(z, _NDTRI_Q1),
                      z * _polevl(z, _NDTRI_P2) / _polevl(z, _NDTRI_Q2))
        tail = x0 - x1
        tail = np.where(upper, tail, -tail)
        out = np.where(y > _EXP_M2, central, tail)
        out = np.where(y0 == 0, -np.inf, np.where(y0 == 1, np.inf, out))
        out = np.where((y0 < 0) | (y0 > 1) | np.isnan(y0), np.nan, out)
    return _back(out, x)


# -- modified Bessel functions (Cephes' Chebyshev series, as calc_i0, calc_i0e, calc_i1, calc_i1e) -------
_I0E_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
          1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
          -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
          9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
          -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
          1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
          -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
          1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
          -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
          1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0E_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
          3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
          1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
          -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
          7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
          -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
          3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
          2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
          8.04490411014108831608E-1)
_I1E_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
          -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
          3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
          -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
          9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
          -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
          4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
          -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
          2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
          -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1E_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
          -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
          -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
          4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
          -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
          3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
          -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
          -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
          7.78576235018280120474E-1)


def _chbevl(x, coeffs):
    b0, b1, b2 = np.full_like(x, coeffs[0]), np.zeros_like(x), np.zeros_like(x)
    for c in coeffs[1:]:
        b2 = b1
        b1 = b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _bessel(x, scaled, order):
    x, v = _f64(x)
    a_coeffs, b_coeffs = (_I0E_A, _I0E_B) if order == 0 else (_I1E_A, _I1E_B)
    with np.errstate(all="ignore"):
        ax = np.abs(v)
        small = _chbevl(ax / 2.0 - 2.0, a_coeffs)
        large = _chbevl(32.0 / ax - 2.0, b_coeffs)
        if scaled:
            out = np.where(ax <= 8.0, small * ax if order else small, large / np.sqrt(ax))
        else:
            e = np.exp(ax)
            if x.dtype == np.float32:      # exp(x) in float overflows there first, as PyTorch's
                e = np.where(e > np.finfo(np.float32).max, np.inf, e)
            out = np.where(ax <= 8.0, e * ax * small if order else e * small, e * large / np.sqrt(ax))
        if order:
            out = np.where(v < 0, -out, out)
    return _back(out, x)


def i0(x):
    """The modified Bessel function of the first kind of order 0."""
    return _bessel(x, False, 0)


def i0e(x):
    """exp(-|x|) * i0(x)."""
    return _bessel(x, True, 0)


def i1(x):
    """The modified Bessel function of the first kind of order 1."""
    return _bessel(x, False, 1)


def i1e(x):
    """exp(-|x|) * i1(x)."""
    return _bessel(x, True, 1)
