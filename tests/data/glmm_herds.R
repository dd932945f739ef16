# lme4's glmer on tests/data/glmm_herds.csv: the reference numbers of
# tests/test_formula_mixedglm.py, computed once with R 4.2.2 (Patched 2022-11-10 r83330)
# and lme4 1.1.31 (Matrix 1.5.3). The CSV was generated once by numpy
# (default_rng(2024)): 30 herds in three sites, binomial cases of size trials, a count.
# bobyqa run to rhoend = 1e-12 and PIRLS to 1e-12: glmer's default stops ~3e-5 short
# of the optimum here (its log-likelihood 5e-5 lower on the binomial Laplace fit).
# Run: Rscript glmm_herds.R glmm_herds.csv glmm_slopes.csv > glmm_herds_lme4.txt
library(lme4)
d <- read.csv(commandArgs(trailingOnly = TRUE)[1])
ctl <- glmerControl(optimizer = "bobyqa", optCtrl = list(maxfun = 1e5, rhoend = 1e-12),
                    tolPwrss = 1e-12,
                    check.conv.grad = .makeCC("warning", tol = 1e-6))
show <- function(label, fit) {
  b <- fixef(fit)
  se <- sqrt(diag(as.matrix(vcov(fit))))
  for (i in seq_along(b))
    cat(sprintf("%s %s %.12g %.12g\n", label, names(b)[i], b[i], se[i]))
  cat(sprintf("%s sigma %.12g NA\n", label, attr(VarCorr(fit)$herd, "stddev")))
  cat(sprintf("%s logLik %.12g NA\n", label, as.numeric(logLik(fit))))
  cat(sprintf("%s deviance %.12g NA\n", label, deviance(fit)))
}
cat("# R", R.version.string, "lme4", as.character(packageVersion("lme4")), "\n")
show("binomial/laplace", glmer(cbind(cases, size - cases) ~ x + treated + (1 | herd),
                               family = binomial, data = d, control = ctl))
show("binomial/agq10", glmer(cbind(cases, size - cases) ~ x + treated + (1 | herd),
                             family = binomial, data = d, nAGQ = 10, control = ctl))
show("poisson/laplace", glmer(count ~ x + treated + (1 | herd), family = poisson, data = d,
                              control = ctl))
show("poisson/agq10", glmer(count ~ x + treated + (1 | herd), family = poisson, data = d,
                            nAGQ = 10, control = ctl))
# random slopes (Laplace) on glmm_slopes.csv (generated once by numpy, default_rng(7):
# 40 herds with a random intercept and slope of x); run with its path as a second argument
slopes <- read.csv(commandArgs(trailingOnly = TRUE)[2])
show_slopes <- function(label, fit) {
  b <- fixef(fit)
  se <- sqrt(diag(as.matrix(vcov(fit))))
  for (i in seq_along(b))
    cat(sprintf("%s %s %.12g %.12g\n", label, names(b)[i], b[i], se[i]))
  th <- getME(fit, "theta")
  for (i in seq_along(th)) cat(sprintf("%s theta%d %.12g NA\n", label, i, th[i]))
  cat(sprintf("%s logLik %.12g NA\n", label, as.numeric(logLik(fit))))
}
show_slopes("binomial/slopes", glmer(cbind(cases, size - cases) ~ x + treated + (1 + x | herd),
                                     family = binomial, data = slopes, control = ctl))
show_slopes("poisson/slopes", glmer(count ~ x + treated + (1 + x | herd), family = poisson,
                                    data = slopes, control = ctl))
