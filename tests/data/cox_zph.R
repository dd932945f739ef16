# R's cox.zph (survival 3.x) on lifelines' shipped data: the reference numbers of
# tests/test_ph_test_survival3.py, computed once with R 4.2.2 and survival 3.5.3.
# The CSVs are lifelines' data sets written by pandas:
#   from lifelines.datasets import load_rossi, load_gbsg2, load_regression_dataset
#   load_rossi().to_csv("rossi.csv", index=False)  # and gbsg2.csv, regression.csv
# Run: Rscript cox_zph.R <directory of the CSVs>
library(survival)
dir <- commandArgs(trailingOnly = TRUE)[1]
rossi <- read.csv(file.path(dir, "rossi.csv"))
gbsg2 <- read.csv(file.path(dir, "gbsg2.csv"))
gbsg2$tgrade <- factor(gbsg2$tgrade, levels = c("I", "II", "III"))
regression <- read.csv(file.path(dir, "regression.csv"))
show <- function(label, z) {
  tab <- z$table
  for (i in seq_len(nrow(tab)))
    cat(sprintf('("%s", "%s"): (%.17g, %d),\n', label, rownames(tab)[i], tab[i, "chisq"],
                as.integer(tab[i, "df"])))
}
ctl <- coxph.control(eps = 1e-14, toler.chol = 1e-15, iter.max = 100)
f_rossi <- Surv(week, arrest) ~ fin + age + race + wexp + mar + paro + prio
efron <- coxph(f_rossi, data = rossi, control = ctl)
breslow <- coxph(f_rossi, data = rossi, ties = "breslow", control = ctl)
for (tr in c("km", "rank", "identity", "log"))
  show(paste0("rossi/efron/", tr), cox.zph(efron, transform = tr))
show("rossi/breslow/km", cox.zph(breslow, transform = "km"))
strat <- coxph(Surv(week, arrest) ~ fin + age + wexp + mar + paro + prio + strata(race),
               data = rossi, control = ctl)
show("rossi/strata/km", cox.zph(strat, transform = "km"))
show("rossi/strata/rank", cox.zph(strat, transform = "rank"))
# each of three sites its own stratum (skfed's strata="site"), rows dealt in turn
rossi$site <- (seq_len(nrow(rossi)) - 1) %% 3
by_site <- coxph(update(f_rossi, . ~ . + strata(site)), data = rossi,
                 control = ctl)
for (tr in c("identity", "log"))
  show(paste0("rossi/site/", tr), cox.zph(by_site, transform = tr))
rossi$w <- 1 + (seq_len(nrow(rossi)) %% 3)
weighted <- coxph(f_rossi, data = rossi, weights = w, control = ctl)
show("rossi/weights/km", cox.zph(weighted, transform = "km"))
show("rossi/weights/rank", cox.zph(weighted, transform = "rank"))
# a time grid: each week replaced by the right end of its interval (c_{k-1}, c_k]
cuts <- seq(4, 52, by = 4)
rossi$grouped <- sapply(rossi$week, function(t) cuts[which(cuts >= t)[1]])
coarse <- coxph(Surv(grouped, arrest) ~ fin + age + race + wexp + mar + paro + prio,
                data = rossi, control = ctl)
for (tr in c("km", "rank", "identity"))
  show(paste0("rossi/grid/", tr), cox.zph(coarse, transform = tr))
thirds <- c(17, 35, 52)  # a grid each site's small-count rule passes
rossi$third <- sapply(rossi$week, function(t) thirds[which(thirds >= t)[1]])
by_third <- coxph(Surv(third, arrest) ~ fin + age + race + wexp + mar + paro + prio,
                    data = rossi, control = ctl)
for (tr in c("km", "rank", "identity"))
  show(paste0("rossi/thirds/", tr), cox.zph(by_third, transform = tr))
f_gbsg2 <- Surv(time, cens) ~ horTh + age + menostat + tsize + tgrade + pnodes + progrec +
  estrec
g <- coxph(f_gbsg2, data = gbsg2, control = ctl)
for (tr in c("km", "rank")) {
  show(paste0("gbsg2/terms/", tr), cox.zph(g, transform = tr))
  show(paste0("gbsg2/columns/", tr), cox.zph(g, transform = tr, terms = FALSE))
}
r <- coxph(Surv(T, E) ~ var1 + var2 + var3, data = regression, control = ctl)
for (tr in c("km", "rank", "identity", "log"))
  show(paste0("regression/", tr), cox.zph(r, transform = tr))
cat(sprintf("# %s, survival %s\n", R.version.string, packageVersion("survival")))
