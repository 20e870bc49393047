# ctest's COST for the slowest tests: seconds each took in `ctest -j2` on a 2-core machine
# (Testing/Temporary/CTestCostData.txt of a development tree, so under some load; only their
# order matters). ctest runs the costliest first, so where it has timed nothing yet (a clean
# checkout: CI) `make test` does not end on one long test with the other core idle; once it
# has timings of its own, they replace these. Every test directory includes this file after its
# tests are discovered (strata_test, cmake/Strata.cmake); a name that is no longer a test is
# ignored. ctest reads this file before a directory's add_test() tests, so those have their
# costs where they are added (tests/CMakeLists.txt, tests/kernels/CMakeLists.txt).
# Regenerate from a development tree's timings with
#   grep -v '^---' build/Testing/Temporary/CTestCostData.txt | awk '$NF >= 3 && !/^(Python|Build)\./ {printf "  %s %d\n", $1, $NF + 0.5}' | sort -k2 -rn
set(strata_test_costs
  BadValues.EveryFloatFlagRefusesNonFiniteAndUnderflowByItsText 75
  BadInput.RlhfFedPrivacyNumbers 32
  MultiHost.LostHostUnderTensorParallelResumesFromTheReplicasOfItsTpRank 24
  LiveAcrossHosts.AHostsTensorParallelReplicaGoesAndAReplicaOfReplacementsJoinsThere 23
  MultiHost.LostHostResumesFromCopiesSpreadOverTheSurvivingHosts 23
  MultiHost.DoctorNamesADownedInterfaceBeforeAndDuringTheRun 21
  LiveAcrossHosts.SeededKillsEachFollowedByAJoin 18
  LiveRecovery.AWholeModelParallelReplicaGoesAndAReplicaOfReplacementsJoins 16
  Recompute.ChangesNoNumberInAnyLayout 15
  TrainPipeline.TensorParallelAtThreeAndFourStagesMatchOneProcess 14
  BadNumbers.SweepOfDataPlanCkptAndBenchFlags 13
  Llama.SharedKeyValueHeadsEqualOneProcess 13
  DoctorSweep.RestartLineNamesTheHungRank 12
  LiveRecovery.SeededKillsEachFollowedByAJoin 12
  TrainPipeline.ContextParallelStagesMatchOneProcess 12
  Llama.EveryLayoutEqualsOneProcess 11
  Llama.RecomputationChangesNoBit 11
  MultiHost.TrainingOnTwoHostsEqualsOneHost 11
  Pipeline.ContextParallelStagesEqualOneProcess 11
  Pipeline.EveryScheduleAtEveryZeroStage 11
  TrainPipeline.TensorParallelStagesMatchOneProcess 11
  LiveAcrossHosts.EachHostKeepsOnlyItsRanksSegmentsAfterAReFormation 10
  MultiHost.KilledRankRestartsOnTheSameHostsWithTheSameLosses 10
  Pipeline.TensorParallelStagesEqualOneProcess 10
  Resume.SupervisedRestartsAtRandomStepsAreBitExact 10
  ResumeChecks.ResumeLineNamesEveryChange 10
  MultiHost.DoctorNamesTpGroupsSpreadOverHosts 9
  Pipeline.TensorParallelSplitBackwardEqualsFused 9
  ResumeDistributed.SupervisedKillIsBitExactAtEveryZeroStage 9
  StageActivations.EachStageEqualsItsFormula 9
  TrainPipeline.Bf16ReductionIsHonouredAtEveryZeroStage 9
  BadInput.TrainFlagSweepNeverCrashes 8
  TrainDistributed.EveryStageAndRankCountMatchesOneProcess 8
  TrainPipeline.TensorParallelCheckpointReshards 8
  Llama.Bf16LayoutsEqualOneProcessBf16 7
  MemCkpt.AKillDuringTheCommitStillRestartsFromACommonStep 7
  MultiHost.DeadHostRestartsOnTheRemainingHosts 7
  MultiHost.DoctorNamesTrafficOnTheWrongInterface 7
  MultiHost.KilledHostRanksRestartOnTheRemainingHosts 7
  Recompute.Bf16InputsKeepHalfTheirBytes 7
  ResumeDistributed.CollectiveFailuresRestartAndMatch 7
  TrainEval.EveryLayoutEvaluatesOneProcessSequences 7
  Llama.SwiGluExpertsInEveryLayout 6
  MoEContextParallel.EveryRoutingModeEqualsOneProcess 6
  PlanCalibrate.WritesAFileThatPlanGpuLocalReads 6
  SentencePieceBpeTest.DefaultsNmtNfkcEqualLibrary 6
  SentencePieceBpeTest.WhitespaceAsSuffixEqualsLibrary 6
  SummaryKeys.EveryLayoutKeepsEveryRecordedKey 6
  Tcp.VanishedHostIsNamedDeadByKeepalive 6
  Bf16Cli.ReduceDtypeSetsTheGradientCollectivesDtype 5
  DocMask.EveryLayoutEqualsOneProcess 5
  FedCli.ManyClientsEndCleanlyEveryRun 5
  LiveRecovery.SurvivorsContinueAsTheSmallerWorldResumedFromDisk 5
  Llama.CheckpointsReshardAcrossLayouts 5
  Llama.DocumentMaskInEveryLayout 5
  MoEBiasTrain.ManyExpertsBiasSurvivesAKillFromMemory 5
  MultiHost.DoctorNamesTheHostWithADegradedLink 5
  MultiHost.FinalFailureLeavesNoSharedMemoryOnAnyHost 5
  RunConfig.ConfigFlagsAndTheRunDirsCopyGiveTheSameLosses 5
  SentencePieceBpeTest.FrozenUserDefinedPiecesNeverMerge 5
  SentencePieceBpeTest.Llama2SettingsEqualLibrary 5
  SentencePieceBpeTest.UnusedPiecesSplitBackAsTheLibraryDoes 5
  SentencePieceBpeTest.UserDefinedAndWhitespacePiecesEqualLibrary 5
  TrainContextParallel.LossesMatchOneProcessAndBytesMatchTheFormula 5
  TrainPipeline.Bf16StaysCloseToFp32 5
  TrainPipeline.EverySchedulePassesEvalSamplingAndResume 5
  TrainPipeline.StagesAsProcessesMatchOneProcess 5
  BadInput.LaunchPpDoctorNumericFlags 4
  BadInput.PlanFlagSweepPrintsOnlyNumbers 4
  Bf16Cli.TracksFp32OnTheSyntheticCorpus 4
  DataPrepare.TwoRunsToOneOutputLeaveOneWholeAndRefuseTheOther 4
  LiveAcrossHosts.SurvivorsOnBothHostsEqualTheSmallerWorld 4
  LiveRecovery.AHungRankIsKilledAndTheOthersContinue 4
  LiveRecovery.AStoppedRankIsKilledAndTheOthersContinue 4
  MemCkpt.ResumeAutoAfterACrashAndAnotherLayout 4
  MemCkpt.RollbackEqualsARunThatNeverSawTheBatch 4
  MemCkpt.SupervisedKillResumesFromMemoryBitForBit 4
  MultiHost.SweepOnThreeHostsMatchesOneHost 4
  Pipeline.DataParallelAtThreeAndFourStagesEqualsOneProcess 4
  Recompute.ActivationBytesEqualThePlanAndFallByIt 4
  Recompute.CommunicationAgainEqualsTheFormula 4
  ReportRender.ChromiumShowsTheChartsWithoutConsoleErrors 4
  SentencePieceBpeTest.UnigramModelsKeepTheLibrarysEncoder 4
  Tcp.TrainMatchesShmBitForBit 4
  TrainDiagnosis.UnderZeroTheInjectedRankIsNamed 4
  TrainPipeline.HungStageIsNamedByTheDoctor 4
  BadPaths.EveryPathFlagRefusesAFifoAndADirectoryForAFile 3
  LiveRecovery.AReplacementJoinsAndTheWorldGrowsBack 3
  Llama.MultiQueryAndTiedEmbeddings 3
  Llama.PipelineStageBytesEqualTheFormula 3
  PipelineMoE.CapacityDropsMatchOneProcessUnderEverySchedule 3
  PlanActivations.PlanAndPlanLocalAgree 3
  PlanCli.JsonHasTheDocumentedKeys 3
  Tcp.StoppedRankTimesOutNamingIt 3
  TrainContextParallel.CheckpointResumesUnderAnotherLayout 3
  TrainPipeline.CheckpointsReshardAcrossPipelineLayouts 3
  TrainPipeline.ContextParallelCheckpointReshards 3
  TrainPipeline.DeadStageIsNamedAndTheRestartContinuesTheRun 3
)
list(LENGTH strata_test_costs n)
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last} 2)
  math(EXPR j "${i} + 1")
  list(GET strata_test_costs ${i} name)
  list(GET strata_test_costs ${j} cost)
  set_tests_properties(${name} PROPERTIES COST ${cost})
endforeach()
